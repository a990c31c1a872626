"""Where the time goes, on the CPU demo for real: the harness records one profiled call per benchmarked config
after its timed loop, the engine derives the figures and keeps the records in the store, and the command line
prints them and writes a Chrome trace that Perfetto and chrome://tracing load.

The seed computes, meets at a barrier and only then sends: its communication runs after its compute. The
fused variant sends every finished chunk while it computes the next: its communication runs under it."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine import blocks
from engine.evaluation.evaluation import FrozenObjectCache, evaluate_source
from engine.timeline import timeline
from engine.workload import load_workload
from remote.local import LocalExecutor

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the demo workload")

CLI = [sys.executable, "-m", "cuco_tui.cli"]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict:
    workload = load_workload("demo")
    fused = next(v for v in workload.design_space.variants if v.name == "fused")
    sources = {"seed": workload.seed_source, "fused": blocks.replace_blocks(workload.seed_source, fused.bodies)}
    work = tmp_path_factory.mktemp("jobs")

    async def main() -> dict:
        executor = LocalExecutor(work_dir=work)
        frozen = FrozenObjectCache()
        try:
            outs = {}
            for name, source in sources.items():  # one at a time: two benchmarks would share the 2 cores
                outs[name] = await asyncio.wait_for(
                    evaluate_source(workload, source, executor, job_prefix=name, seed=7, frozen=frozen), 200
                )
            return outs
        finally:
            await executor.close()

    return asyncio.run(main())


def test_seed_communicates_after_its_compute_and_fused_under_it(outcomes):
    for name, out in outcomes.items():
        assert out.status == "done", (name, out.reason)
        assert set(out.timelines) == {"tall", "square"}  # every benchmarked config, no other
        assert set(out.metrics["timeline"]) == {"tall", "square"}
    for config, figs in outcomes["seed"].metrics["timeline"].items():
        assert figs["overlap_fraction"] < 0.1, (config, figs)
        for r in figs["ranks"]:  # all of its communication is exposed, and it did communicate
            assert r["comm_ms"] > 0.5 and r["exposed_comm_ms"] > 0.9 * r["comm_ms"], (config, r)
    for config, figs in outcomes["fused"].metrics["timeline"].items():
        assert figs["overlap_fraction"] > 0.5, (config, figs)
        assert figs["critical_rank"] in (0, 1)


def test_seed_idles_at_its_barrier(outcomes):
    # Somebody waits at the barrier for the slower rank, then both wait for their data: the gaps say so.
    for config, figs in outcomes["seed"].metrics["timeline"].items():
        kinds = {r["largest_gap_in"] for r in figs["ranks"] if r["largest_gap_ms"] > 0}
        assert kinds <= {"barrier", "wait"} and kinds, (config, figs["ranks"])


def test_records_leave_the_stored_result_small(outcomes):
    for out in outcomes.values():
        bench = out.metrics["benchmark"]
        assert all("timeline" not in c for c in bench["configs"])  # carried separately, into the blob
        raw = out.timelines["tall"]
        assert raw["source"] == "cpu-link" and len(raw["ranks"]) == 2 and raw["dropped"] == 0
        puts = [e for e in raw["events"] if e["k"] == "put"]
        assert puts and all(e["t0"] <= e["carried"] <= e["t1"] for e in puts)  # queued, carried, landed


def test_trace_has_one_process_per_rank_and_lanes_per_thread_and_link(outcomes):
    for out in outcomes.values():
        parsed = {c: timeline.parse(c, raw) for c, raw in out.timelines.items()}
        trace = json.loads(json.dumps(timeline.chrome_trace(parsed, "t")))
        events = trace["traceEvents"]
        processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
        assert processes == {0: "rank 0", 1: "rank 1"}
        threads = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
        assert {(0, "rank 0"), (0, "link 0"), (1, "rank 1"), (1, "link 1")} <= threads
        for e in events:
            if e["ph"] == "X":
                assert e["pid"] in processes and e["dur"] >= 0 and e["ts"] >= 0
                assert e["cat"] in ("compute", "comm", "wait", "idle", "config")


def cuco(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(CLI + ["--home", str(home), *args], capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, f"cuco {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


def test_report_timeline_and_trace_export_from_the_store(tmp_path):
    home = tmp_path / "home"
    cuco(home, "run", "demo", "--headless", "--max-evals", "3", "--name", "tl")
    report = json.loads(cuco(home, "report", "tl", "--json").stdout)
    seed = 1
    figs = json.loads(cuco(home, "report", str(seed), "--timeline", "--json").stdout)
    assert figs["candidate"] == seed and set(figs["configs"]) == {"tall", "square"}
    assert all(f["overlap_fraction"] < 0.1 for f in figs["configs"].values())
    text = cuco(home, "report", str(seed), "--timeline").stdout
    assert "overlap fraction" in text and "critical rank" in text and "exposed" in text

    out = tmp_path / "trace.json"
    printed = cuco(home, "export", "--trace", str(report["best"]["candidate"]), "-o", str(out)).stdout
    assert "2 rank(s)" in printed
    trace = json.loads(out.read_text())
    assert {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"} == {0, 1}

    bad = cuco(home, "report", "nope", "--timeline", check=False)
    assert bad.returncode == 2 and "CANDIDATE" in bad.stderr and "Traceback" not in bad.stderr
    missing = cuco(home, "export", "--trace", "999", "-o", str(tmp_path / "x.json"), check=False)
    assert missing.returncode == 2 and "no candidate 999" in missing.stderr
