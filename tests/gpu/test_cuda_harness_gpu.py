"""GPU tests of the frozen CUDA harness: run on a node with >= 2 NVIDIA GPUs (skipped elsewhere).

Each test builds (cached) and runs the harness exactly as the engine does, through
workloads/_harness/cuda/run_local.py, and asserts on result.json only.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine import blocks  # engine.blocks alone: the GPU machine has no pyelftools for engine.workload

ROOT = Path(__file__).resolve().parents[2]
RUN_LOCAL = ROOT / "workloads" / "_harness" / "cuda" / "run_local.py"
GA = ROOT / "workloads" / "gemm_allgather"
KV = ROOT / "workloads" / "kv_transfer"
BAD = Path(__file__).resolve().parent / "bad_candidates"


def _gpu_count() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(1 for line in r.stdout.splitlines() if line.startswith("GPU "))


_N = _gpu_count()
if _N == 0:
    print("tests/gpu/test_cuda_harness_gpu.py: skipped: no nvidia-smi / no NVIDIA GPU on this machine")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_N == 0, reason="no nvidia-smi: the CUDA harness needs NVIDIA GPUs"),
    pytest.mark.skipif(0 < _N < 2, reason="the CUDA harness tests need 2 GPUs"),
]


def run(
    workload: Path,
    source: Path | None = None,
    mode: str = "verify",
    configs: str | None = None,
    timeout: float | None = None,
    iters: int | None = None,
) -> dict:
    argv = [sys.executable, str(RUN_LOCAL), str(workload), "--mode", mode, "--ranks", "2"]
    if source:
        argv += ["--source", str(source)]
    if configs:
        argv += ["--configs", configs]
    if timeout:
        argv += ["--timeout", str(timeout)]
    if iters:
        argv += ["--iters", str(iters)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    sys.stderr.write(r.stderr[-4000:])
    out = r.stdout
    return json.loads(out[out.index("{") :])


def test_gemm_allgather_seed_verifies_on_every_config():
    res = run(GA)
    assert res["correct"], res
    names = {c["name"] for c in res["configs"]}
    assert {"m8k_k4096", "small_m1k", "hidden_odd", "hidden_tall"} <= names


@pytest.mark.parametrize("variant", sorted(p.name for p in (GA / "variants").glob("*.cu")))
def test_gemm_allgather_variant_verifies(variant):
    res = run(GA, GA / "variants" / variant)
    assert res["correct"], res


@pytest.mark.parametrize(
    "source", ["candidate.cu"] + sorted("variants/" + p.name for p in (KV / "variants").glob("*.cu"))
)
def test_kv_transfer_verifies(source):
    res = run(KV, KV / source)
    assert res["correct"], res


@pytest.mark.parametrize(
    "source", ["candidate.cu"] + sorted("variants/" + p.name for p in (KV / "variants").glob("*.cu"))
)
def test_kv_transfer_benchmark_calls_pass_their_per_call_check(source):
    """The benchmark loop's check (the tensor-core reference compared in its epilogue, the decode cache
    bit-exact) believes every honest source on a multi-layer config and on one of odd sizes."""
    res = run(KV, KV / source, mode="benchmark", configs="small_l16_t1k,hidden_odd", iters=5)
    assert res["correct"], res
    assert all(c["speedup"] is not None for c in res["configs"])


KV_SEED_RUN = "static int impl_run(cuco_ctx* ctx) {\n  KvState* s = (KvState*)ctx->state;\n"
KV_CHEATS = {  # the seed, honest on the verification stage's two calls, cheating on every later one
    "skip_last_layer_gemm": (
        "for (long long l = 0; l < s->L; l++) {",
        "for (long long l = 0; l < s->L - (calls > 2 ? 1 : 0); l++) {",
        0,
        "compute",
    ),
    "send_all_but_last_layer": (
        "s->L * layer * 2, ncclInt8",
        "(s->L - (calls > 2 ? 1 : 0)) * layer * 2, ncclInt8",
        1,
        "transfer",
    ),
}


@pytest.mark.parametrize("cheat", sorted(KV_CHEATS))
def test_kv_transfer_work_left_out_of_benchmark_calls_is_caught(cheat, tmp_path):
    """Every warm-up and timed call is checked: work skipped only after the verification stage's calls is
    found on the first of them, on the rank that lacks it, in the last layer."""
    old, new, rank, what = KV_CHEATS[cheat]
    seed = (KV / "candidate.cu").read_text()
    src = seed.replace(KV_SEED_RUN, KV_SEED_RUN + "  static int calls = 0;\n  ++calls;\n").replace(old, new)
    assert src.count("calls > 2") >= 1 and "static int calls" in src
    blocks.validate_child(seed, src)
    (tmp_path / f"{cheat}.cu").write_text(src)
    res = run(KV, tmp_path / f"{cheat}.cu", mode="benchmark", configs="small_l16_t1k", iters=5)
    assert res["correct"] is False
    c = res["configs"][0]
    assert c["mismatch"]["rank"] == rank and c["mismatch"]["what"] == what and c["mismatch"]["buffer"] == "KV"
    L, T, E = 16, 1024, 512
    assert c["mismatch"]["index"] >= (L - 1) * T * E  # in the layer left out
    assert "warm-up" in c["error"] or "timed" in c["error"]


def test_wrong_candidate_reports_rank_config_index():
    res = run(GA, BAD / "wrong.cu", configs="small_m1k")
    assert res["correct"] is False
    c = res["configs"][0]
    assert c["mismatch"]["rank"] == 1 and c["mismatch"]["config"] == "small_m1k"
    assert c["mismatch"]["index"] == 4711 and c["mismatch"]["what"] == "gather"


def test_fake_pass_candidate_is_not_believed():
    res = run(GA, BAD / "fake_pass.cu", mode="benchmark", configs="small_m1k")
    assert res["correct"] is False
    assert res["configs"][0]["mismatch"] is not None
    assert res["configs"][0]["candidate_ms"] is None


def test_hanging_candidate_is_killed_and_gpus_stay_usable():
    res = run(GA, BAD / "hang.cu", configs="small_m1k", timeout=45)
    assert res["correct"] is False
    assert "timeout" in (res["error"] or "")
    again = run(GA, configs="small_m1k")  # the next job on the same GPUs
    assert again["correct"], again


def test_slowed_candidate_measures_slower():
    res = run(GA, BAD / "slow.cu", mode="benchmark", configs="small_m1k", iters=7)
    assert res["correct"], res
    c = res["configs"][0]
    assert c["candidate_ms"] > c["baseline_ms"] + 1.5  # it spins 2 ms per call
    assert c["speedup"] < 1.0


def test_work_escaping_the_timed_stream_is_caught():
    res = run(GA, BAD / "escape.cu", mode="benchmark", configs="m8k_k4096", iters=7)
    assert res["correct"] is False
    assert "escaped" in (res["configs"][0]["error"] or "")


def test_forged_result_with_the_harness_killed_is_not_believed(tmp_path):
    """Through the engine's own cascade (evaluate_source on a LocalExecutor): rank 0 writes a perfect
    result.json (speedup 50) and SIGKILLs the harness before it writes its own. Without the nonce the
    forgery is believed (the hole is real); with it (the shipped workload) the candidate fails."""
    import asyncio
    import dataclasses

    from engine.evaluation.evaluation import FrozenObjectCache, evaluate_source
    from engine.workload import load_workload
    from remote.local import LocalExecutor

    workload = load_workload(str(GA))
    assert workload.harness_nonce, "the shipped CUDA workloads ask for the nonce"
    source = (BAD / "forge.cu").read_text()

    async def evaluate(w):
        ex = LocalExecutor(work_dir=tmp_path / f"jobs-{w.harness_nonce}")
        try:
            return await asyncio.wait_for(
                evaluate_source(
                    w, source, ex, job_prefix=f"forge-{w.harness_nonce}", seed=77, frozen=FrozenObjectCache()
                ),
                600,
            )
        finally:
            await ex.close()

    guarded = asyncio.run(evaluate(workload))
    assert guarded.status == "failed", guarded
    assert "nonce" in guarded.reason, guarded.reason
    unguarded = asyncio.run(evaluate(dataclasses.replace(workload, harness_nonce=False)))
    assert unguarded.status == "done" and unguarded.speedup > 10, unguarded
