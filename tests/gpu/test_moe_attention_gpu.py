"""GPU tests of moe_dispatch_combine and attention_allgather: seed and variants verified and timed, and the
incorrect candidates caught, on CUCO_TEST_RANKS GPUs (default 1: one GPU runs routing, the expert GEMMs,
the attention kernel, verification and timing; 2 or 4 on a machine of that many GPUs). Skipped without a
GPU. Each test builds (cached) and runs the harness exactly as the engine does, through
workloads/_harness/cuda/run_local.py, and asserts on result.json only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RUN_LOCAL = ROOT / "workloads" / "_harness" / "cuda" / "run_local.py"
MOE = ROOT / "workloads" / "moe_dispatch_combine"
ATTN = ROOT / "workloads" / "attention_allgather"
BAD = Path(__file__).resolve().parent / "bad_candidates"
RANKS = int(os.environ.get("CUCO_TEST_RANKS", "1"))


def _gpu_count() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(1 for line in r.stdout.splitlines() if line.startswith("GPU "))


_N = _gpu_count()
if _N < RANKS:
    print(f"tests/gpu/test_moe_attention_gpu.py: skipped: {RANKS} GPU(s) needed, {_N} here")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_N < RANKS, reason=f"needs {RANKS} NVIDIA GPU(s), {_N} here")]


def configs(workload: Path, bench_only: bool = False) -> list[str]:
    spec = yaml.safe_load((workload / "workload.yaml").read_text())
    return [c["name"] for c in spec["configs"] if c["params"].get("ranks") == RANKS and (c["bench"] or not bench_only)]


def run(workload: Path, source: Path | None, mode: str, names: list[str]) -> dict:
    argv = [
        sys.executable,
        str(RUN_LOCAL),
        str(workload),
        "--mode",
        mode,
        "--ranks",
        str(RANKS),
        "--configs",
        ",".join(names),
    ]
    if source:
        argv += ["--source", str(source)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    sys.stderr.write(r.stderr[-4000:])
    res = json.loads(r.stdout[r.stdout.index("{") :])
    print(
        json.dumps(
            {
                "source": (source or workload / "candidate.cu").name,
                "mode": mode,
                "correct": res.get("correct"),
                "error": res.get("error"),
                "configs": [
                    {
                        k: c.get(k)
                        for k in (
                            "name",
                            "correct",
                            "speedup",
                            "baseline_ms",
                            "candidate_ms",
                            "comp_ms",
                            "comm_ms",
                            "bound",
                            "error",
                            "mismatch",
                        )
                    }
                    for c in res.get("configs", [])
                ],
            }
        )
    )
    return res


def _variants(workload: Path) -> list[Path]:
    spec = yaml.safe_load((workload / "workload.yaml").read_text())
    return [workload / v["file"] for v in spec["variants"]]


@pytest.mark.parametrize("workload", [MOE, ATTN], ids=lambda p: p.name)
def test_seed_verifies_and_measures_one_against_its_baseline(workload):
    names = configs(workload)
    res = run(workload, None, "benchmark", names)
    assert res["correct"], res
    assert {c["name"] for c in res["configs"]} == set(names)
    for c in res["configs"]:
        assert c["correct"] and 0.93 <= c["speedup"] <= 1.07, c  # the same code: 1.0x within noise
        assert c["comp_ms"] > 0 and c["comm_ms"] > 0


@pytest.mark.parametrize("source", _variants(MOE) + _variants(ATTN), ids=lambda p: f"{p.parents[1].name}/{p.stem}")
def test_variant_verifies_on_every_config(source):
    workload = source.parents[1]
    names = configs(workload)
    res = run(workload, source, "benchmark", names)
    assert res["correct"], res
    assert {c["name"] for c in res["configs"]} == set(names)
    assert all(c["correct"] and c["speedup"] > 0 for c in res["configs"])


@pytest.mark.parametrize(
    "bad,workload,what,buffer",
    [
        pytest.param(b, w, what, buf, id=f"{w.name}/{b[:-3]}")
        for b, w, what, buf in [
            ("moe_drop_tokens.cu", MOE, "transfer", "RECV"),
            ("moe_double_count.cu", MOE, "compute", "Y"),
            ("attn_lse_skip.cu", ATTN, "compute", "O"),
        ]
    ],
)
def test_incorrect_candidate_is_caught_with_rank_config_and_index(bad, workload, what, buffer):
    names = configs(workload)
    res = run(workload, BAD / bad, "verify", names)
    assert res["correct"] is False
    wrong = [c for c in res["configs"] if not c["correct"]]
    assert wrong, res
    for c in wrong:
        m = c["mismatch"]
        assert m is not None, c
        assert m["config"] == c["name"] and 0 <= m["rank"] < RANKS and m["index"] >= 0, m
        assert m["what"] == what and m["buffer"] == buffer, m
        assert m["expected"] != m["got"], m


def test_attention_rows_skipped_after_verification_are_caught_on_a_benchmark_call():
    """Verification checks every row (the full fp32 reference); each benchmark call, fresh inputs each, is
    checked on random (row, head) pairs picked after the call. A candidate honest on its first two calls of a
    config that then leaves out its last 64 query rows (zeros there, so no poison is left) passes verification
    and is caught on its first warm-up call, in the rows it skipped."""
    bad = BAD / "attn_skip_rows_timed.cu"
    assert run(ATTN, bad, "verify", configs(ATTN))["correct"] is True  # the calls checked in full are honest
    names = configs(ATTN, bench_only=True)
    res = run(ATTN, bad, "benchmark", names)
    assert res["correct"] is False
    params = {c["name"]: c["params"] for c in yaml.safe_load((ATTN / "workload.yaml").read_text())["configs"]}
    for c in res["configs"]:
        assert not c["correct"] and "a warm-up call" in (c["error"] or ""), c
        m = c["mismatch"]
        assert m["what"] == "compute" and m["buffer"] == "O" and m["got"] == 0 and m["expected"] != 0, m
        p = params[c["name"]]
        first_skipped = (p["S"] // RANKS - 64) * p["HQ"] * 128
        assert m["index"] >= first_skipped, (m, first_skipped)  # a skipped row, not an honest one
