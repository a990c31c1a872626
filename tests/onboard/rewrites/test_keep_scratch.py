"""keep_scratch: a helper the region calls that allocates and frees a scratch buffer on every call (the
ring all-reduce's) keeps it across calls instead. Offered where the allocation and the free are
statements of the helper's own block; refused with the reason where not; init searches it in the harness
(the helper is in the candidate's kernels block) and export writes it back into the program."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine import blocks
from engine.onboard.analyze import analyze_files
from engine.onboard.export_patch import patch_for
from engine.onboard.rewrites import Offer, Refusal, check_all, facts_from_analysis

RING = (
    Path(__file__).resolve().parents[3]
    / ".."
    / "shared"
    / "corpus"
    / "async_ring_allreduce_single"
    / "ring_allreduce.cu"
)
CLI = [sys.executable, "-m", "cuco_tui.cli"]


def ring_variant(tmp_path, old: str, new: str) -> Path:
    if not RING.is_file():
        pytest.skip(f"the corpus is not at {RING.parent.parent}")
    text = RING.read_text()
    assert old in text
    out = tmp_path / "ring_allreduce.cu"
    out.write_text(text.replace(old, new))
    return out


def verdict(path: Path) -> Offer | Refusal:
    return {v.rewrite: v for v in check_all(facts_from_analysis(analyze_files([str(path)])))}["keep_scratch"]


@pytest.mark.parametrize(
    "old, new, reason",
    [
        (
            "    CUDACHECK(cudaFree(scratch_buff));",
            "    if (count) CUDACHECK(cudaFree(scratch_buff));",
            "the allocation or the free of scratch_buff is under a condition or a loop",
        ),
        (
            "    CUDACHECK(cudaFree(scratch_buff));",
            "",
            "scratch_buff is allocated 1 and freed 0 time(s) in ringAllReduce()",
        ),
        ("    float* scratch_buff;\n", "", "scratch_buff is not declared in ringAllReduce()'s body"),
    ],
)
def test_refused_where_the_scratch_is_not_a_plain_per_call_buffer(tmp_path, old, new, reason):
    f = ring_variant(tmp_path, old, new)
    if "not declared" in reason:
        f.write_text(f.read_text().replace("int main(", "float* scratch_buff;\nint main("))
    v = verdict(f)
    assert isinstance(v, Refusal) and reason in v.reason, v


def test_init_searches_it_and_export_writes_it_back(tmp_path):
    f = ring_variant(tmp_path, "// free", "// free")
    out = tmp_path / "w"
    r = subprocess.run(
        [*CLI, "init", f.name, "--ranks", "2", "-o", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    spec = yaml.safe_load((out / "workload.yaml").read_text())
    assert spec["design_space"]["dimensions"]["rewrites"]["values"] == ["none", "keep_scratch"]
    seed = (out / "candidate.cu").read_text()
    variant = blocks.block_bodies((out / "variants" / "rw_keep_scratch.cu").read_text())
    assert set(variant) == {"kernels", "schedule"}  # the helper lives in the kernels block
    diff, notes = patch_for(blocks.replace_blocks(seed, variant), out, "candidate 4")
    assert (
        "-    CUDACHECK(cudaFree(scratch_buff));" in diff
        and "+    static void* cuco_keep_scratch_buff = nullptr;" in diff
    )
    assert notes[0].startswith("keep_scratch: scratch_buff of ringAllReduce()")
    r = subprocess.run(
        ["patch", "-p1", "--dry-run"], input=diff, text=True, cwd=tmp_path, capture_output=True, timeout=30
    )
    assert r.returncode == 0, r.stdout + r.stderr
