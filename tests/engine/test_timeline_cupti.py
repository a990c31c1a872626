"""CUPTI's records as the CUDA harness wrote them on an H100 (tests/gpu/data/cupti_staged_copy.json: a
gemm_allgather seed with a copy-engine stage, one rank): read into lanes (the stream, the copy engine),
the kernel counted as compute and the copy as communication, exported with one process for the rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.timeline import timeline

DATA = Path(__file__).resolve().parents[1] / "gpu" / "data" / "cupti_staged_copy.json"


@pytest.fixture
def recorded() -> dict:
    return {c["name"]: c["timeline"] for c in json.loads(DATA.read_text())["configs"]}


def test_kernels_are_compute_and_copies_communication(recorded):
    for config, raw in recorded.items():
        tl = timeline.parse(config, raw)
        (rank,) = tl.ranks
        kinds = {(iv.lane, iv.kind, iv.name) for iv in rank.intervals}
        assert ("stream 18", "compute", "cuco_gemm::gemm_kernel<cuco_gemm::StoreEpi>") in kinds
        assert ("copy engine (stream 18)", "comm", "memcpy DtoD") in kinds
        figs = timeline.figures(tl)
        r = figs["ranks"][0]
        copy = next(e for e in raw["events"] if e["k"] == "memcpy")
        # One stream: the copy waits for the GEMM, so all of it is exposed and nothing overlaps.
        assert r["comm_ms"] == pytest.approx((copy["t1"] - copy["t0"]) / 1e3)
        assert r["exposed_comm_ms"] == pytest.approx(r["comm_ms"]) and figs["overlap_fraction"] == 0.0
        assert r["dominant"] == "cuco_gemm::gemm_kernel<cuco_gemm::StoreEpi>"
        assert r["idle_ms"] < 0.05 * r["span_ms"]  # the launch gaps of one profiled call, not the profiler's


def test_trace_of_recorded_records(recorded):
    trace = timeline.chrome_trace({c: timeline.parse(c, raw) for c, raw in recorded.items()})
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"stream 18", "copy engine (stream 18)"} <= names
    assert {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"} == {0}
    copies = [e for e in trace["traceEvents"] if e.get("cat") == "comm"]
    assert len(copies) == 2 and all(e["args"]["bytes"] == 64 << 20 for e in copies)


def test_a_missing_libcupti_is_a_reason_not_a_crash():
    figs = timeline.summarize({"m8k": {"error": "rank 0: no timeline: libcupti not found (...)"}})
    assert figs["m8k"]["error"] == "rank 0: no timeline: libcupti not found (...)"
    assert (
        timeline.summarize({"m8k": {"source": "nvtx"}})["m8k"]["error"] == "no timeline: unknown timeline source 'nvtx'"
    )
    raws = timeline.take_from_result({"configs": [{"name": "m8k", "timeline_error": "rank 0: no timeline: x"}]})
    assert raws == {"m8k": {"error": "rank 0: no timeline: x"}}
