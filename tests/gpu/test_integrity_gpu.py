"""The adversarial CUDA candidates that pass the symbol policy, measured by the CUDA harness on one GPU
(skipped without one; docs/gpu-runs.md has the recorded run). Each must fail or measure honestly; each
test names the defence that caught it. The ones the policy refuses never run: tests/integrity/."""

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
BAD = Path(__file__).resolve().parent / "bad_candidates"
CONFIGS = "hidden_odd,hidden_tall"  # at 1 rank the bench configs (2 and 4 ranks) do not apply

_gpu = shutil.which("nvidia-smi") is not None and subprocess.run(
    ["nvidia-smi", "-L"], capture_output=True, text=True
).stdout.startswith("GPU ")
if not _gpu:
    print("tests/gpu/test_integrity_gpu.py: skipped: no NVIDIA GPU on this machine")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _gpu, reason="no NVIDIA GPU: the CUDA harness needs one")]


def bench(source: Path) -> dict:
    """run_local.py's verdict (the harness's result as the launching process judged it: nonce, wall time)."""
    r = subprocess.run(
        [
            sys.executable,
            str(RUN_LOCAL),
            str(GA),
            "--source",
            str(source),
            "--mode",
            "benchmark",
            "--ranks",
            "1",
            "--configs",
            CONFIGS,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = r.stdout.splitlines()  # the harness's own lines come first, the verdict's JSON last
    assert "{" in lines, f"no verdict (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    res = json.loads("\n".join(lines[lines.index("{") :]))
    print(
        source.name,
        json.dumps(
            {
                "correct": res["correct"],
                "error": res.get("error"),
                "timed_ms": res.get("timed_ms"),
                "configs": [{k: c.get(k) for k in ("name", "correct", "speedup", "error")} for c in res["configs"]],
            }
        ),
    )
    return res


def test_call_counting_to_skip_timed_work_is_incorrect(tmp_path):
    """Outputs poisoned before every call and verified after the timed loop."""
    seed = (GA / "candidate.cu").read_text()
    head = "static int impl_run(cuco_ctx* ctx) {\n"
    src = seed.replace(head, head + "  static int calls = 0;\n  if (++calls > 8) return 0;\n")
    blocks.validate_child(seed, src)
    (tmp_path / "call_counting.cu").write_text(src)
    res = bench(tmp_path / "call_counting.cu")
    assert res["correct"] is False
    assert any("output wrong" in (c.get("error") or "") for c in res["configs"])


def test_work_left_off_the_timed_stream_is_caught():
    """The host wall time of each call against its event time, compared with the baseline's."""
    res = bench(BAD / "escape.cu")
    assert res["correct"] is False
    assert any("work escaped the timed stream" in (c.get("error") or "") for c in res["configs"])


def test_a_slowed_candidate_measures_slower_and_the_timings_fit_the_wall_time():
    """The timer measures the candidate; run_local.py's own wall time holds every timed call."""
    res = bench(BAD / "slow.cu")
    assert res["correct"] is True and all(c["speedup"] < 0.5 for c in res["configs"])
    assert res["timed_ms"] > 0


def test_a_helper_thread_left_running_is_refused():
    """A thread the candidate's setup started and left running would launch work after every call's clock
    stopped: the harness lists the process's threads (the kernel's /proc/self/task) after setup and after
    every call, and refuses one that is not the runtime's."""
    res = bench(BAD / "host_thread.cu")
    assert res["correct"] is False
    errors = [c.get("error") or "" for c in res["configs"]] + [res.get("error") or ""]
    assert any("thread(s) it started still running" in e for e in errors), errors
