"""CPU-side checks of moe_dispatch_combine and attention_allgather: the spec and the blocks (the same checks
as tests/test_cuda_workloads.py), their configs for 1, 2 and 4 ranks, the frozen seed copies their
baselines include, `cuco validate` compiling the seed and every variant with the harness, and the
incorrect candidates of tests/gpu/bad_candidates compiling (tests/gpu/test_moe_attention_gpu.py runs them).

nvcc and the nvidia-nccl-cu13==2.28.9 wheel are needed for the compile tests; without them those tests are
skipped with the reason printed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from tests.test_cuda_workloads import _nvcc, _stage, _why, needs_nvcc, sources
from tests.test_cuda_workloads import test_blocks_designs_and_knobs as check_blocks
from tests.test_cuda_workloads import test_variants_differ_from_the_seed_only_inside_blocks as check_variants
from tests.test_cuda_workloads import test_workload_yaml_has_documented_fields as check_spec

ROOT = Path(__file__).resolve().parents[1]
MOE = ROOT / "workloads" / "moe_dispatch_combine"
ATTN = ROOT / "workloads" / "attention_allgather"
WORKLOADS = [MOE, ATTN]
# every shipped CUDA workload: `cuco validate` compiles each one's seed and variants as a user would
EVERY_CUDA_WORKLOAD = [ROOT / "workloads" / "gemm_allgather", ROOT / "workloads" / "kv_transfer", MOE, ATTN]
SEED_COPIES = {MOE: "moe_seed.inc", ATTN: "attn_seed.inc"}
BAD = {"moe_drop_tokens.cu": MOE, "moe_double_count.cu": MOE, "attn_lse_skip.cu": ATTN, "attn_skip_rows_timed.cu": ATTN}
if _why:
    print(f"tests/test_new_cuda_workloads.py: compile tests skipped: {_why}")


@pytest.mark.parametrize("w", WORKLOADS, ids=lambda p: p.name)
def test_spec_blocks_and_variants(w):
    check_spec(w)
    for src in sources(w):
        check_blocks(src)
    check_variants(w)
    assert len(sources(w)) >= 3, "the seed and at least two variants"


@pytest.mark.parametrize("w", WORKLOADS, ids=lambda p: p.name)
def test_configs_for_one_two_and_four_ranks_with_hidden_ones(w):
    spec = yaml.safe_load((w / "workload.yaml").read_text())
    for ranks in (1, 2, 4):
        mine = [c for c in spec["configs"] if c["params"].get("ranks") == ranks]
        assert any(c["bench"] and c["public"] for c in mine), (w.name, ranks)
        assert any(not c["public"] for c in mine), (w.name, ranks, "no hidden config")


def test_moe_configs_set_balanced_and_skewed_routing():
    spec = yaml.safe_load((MOE / "workload.yaml").read_text())
    for ranks in (1, 2, 4):
        skews = {c["params"]["skew"] for c in spec["configs"] if c["params"].get("ranks") == ranks and c["bench"]}
        assert 0 in skews and max(skews) > 0, (ranks, skews)
    assert all(c["params"]["H"] == 7168 and c["params"]["F"] == 2048 for c in spec["configs"] if c["public"])


def test_attention_configs_are_causal_and_not_short_and_long():
    spec = yaml.safe_load((ATTN / "workload.yaml").read_text())
    for ranks in (2, 4):
        mine = [c["params"] for c in spec["configs"] if c["params"].get("ranks") == ranks and c["bench"]]
        assert {p["causal"] for p in mine} == {0, 1}
        assert min(p["S"] for p in mine) < 1536 and max(p["S"] for p in mine) >= 16384  # comm- and compute-bound


@pytest.mark.parametrize("w", WORKLOADS, ids=lambda p: p.name)
def test_frozen_seed_copy_matches_the_shipped_seed(w):
    # The baseline is the seed's own translation unit (baseline.cu includes the copy): if the two drift
    # apart, the seed no longer measures 1.0x and the speedups mean something else.
    assert (w / SEED_COPIES[w]).read_text() == (w / "candidate.cu").read_text()


@needs_nvcc
@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("w", EVERY_CUDA_WORKLOAD, ids=lambda p: p.name)
def test_cuco_validate_compiles_seed_and_every_variant(w, tmp_path):
    env = dict(os.environ)
    r = subprocess.run(
        [sys.executable, "-m", "cuco_tui.cli", "--home", str(tmp_path / "home"), "validate", str(w)],
        capture_output=True,
        text=True,
        timeout=1700,
        env=env,
        cwd=tmp_path,
    )
    out = " ".join(r.stdout.split())
    assert r.returncode == 0, r.stdout + r.stderr
    spec = yaml.safe_load((w / "workload.yaml").read_text())
    for name in ["seed"] + [v["name"] for v in spec["variants"]]:
        assert f"compiled {name} (" in out, (name, out[-3000:])
    assert "compile failed" not in out


@needs_nvcc
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_incorrect_candidates_compile(tmp_path):
    jobs = []
    for name, w in BAD.items():
        job = tmp_path / name.removesuffix(".cu")
        jobs.append((job, _stage(w, ROOT / "tests" / "gpu" / "bad_candidates" / name, job)[0]))
    with ThreadPoolExecutor(max_workers=2) as ex:
        results = list(ex.map(lambda j: (j, _nvcc(["-c", j[1], "-o", j[1] + ".o"], j[0])), jobs))
    for (job, name), r in results:
        assert r.returncode == 0, f"{job.name}/{name}:\n{r.stderr[-3000:]}"
