"""One config's efficiency verdict (engine/evaluation/efficiency.py), and `cuco report` giving it: a candidate that beat
max(compute-only, communication-only) of the baseline changed the compute, so it is reported as "compute
changed" with its own compute time, never as an overlap efficiency above 1 (the 2.90 a split-K GEMM once
showed on a small config)."""

from __future__ import annotations

import json

import pytest

from engine.evaluation.efficiency import COMPUTE_CHANGED, OVERLAP, judge
from engine.store.store import ReadStore
from engine.views.report import build_report
from tests.gpu.test_efficiency_table import _make_store


def config(base: float, cand: float, comp: float, comm: float, name: str = "c") -> dict:
    return {
        "name": name,
        "correct": True,
        "baseline_ms": base,
        "candidate_ms": cand,
        "comp_ms": comp,
        "comm_ms": comm,
        "speedup": base / cand,
    }


def figures(*compute_ms: float) -> dict:
    return {
        "source": "cupti",
        "ranks": [{"rank": r, "compute_ms": t, "comm_ms": 0.01} for r, t in enumerate(compute_ms)],
    }


def test_an_overlapping_candidate_gets_its_share_of_the_window():
    v = judge(config(2.0, 1.6, 1.5, 0.4))
    assert (v.kind, v.label()) == (OVERLAP, "0.80") and v.efficiency == pytest.approx(0.8)


def test_a_candidate_within_the_noise_margin_of_the_bound_is_at_the_bound_not_above_it():
    v = judge(config(12.0, 6.5, 3.0, 7.0))  # 7 % under the 7 ms bound: raw efficiency 1.1
    assert v.kind == OVERLAP and v.efficiency == 1.0 and v.label() == "1.00"


def test_a_candidate_far_under_the_bound_changed_the_compute_and_shows_its_own_compute_time():
    small_gemm = config(0.0431, 0.0124, 0.0307, 0.0198)  # split-K: raw efficiency 2.4 against the bound
    v = judge(small_gemm, figures(0.0081, 0.0093))
    assert v.kind == COMPUTE_CHANGED and v.efficiency is None
    assert v.own_compute_ms == pytest.approx(0.0093)  # the slowest rank's compute
    assert v.label() == "compute changed, own compute 0.0093 ms"
    assert v.meets == 1.0  # beat every overlap of the baseline's work
    assert judge(small_gemm).label() == "compute changed"  # no timeline: no own compute time invented


def test_no_usable_bound_judges_nothing():
    v = judge(config(4.166, 2.752, 4.468, 2.817))  # compute-only measured longer than the baseline
    assert v.kind is None and v.meets is None and v.label() == "n/a"


def test_the_report_says_compute_changed_where_the_best_beat_the_bound(tmp_path):
    db = _make_store(tmp_path)
    import sqlite3

    con = sqlite3.connect(db)
    metrics = {
        "benchmark": {"configs": [config(2.0, 1.6, 1.5, 0.4, "big"), config(0.1, 0.05, 0.08, 0.02, "small")]},
        "timeline": {"small": figures(0.04, 0.045)},
    }
    con.execute(
        "update candidates set metrics_json = ?, fitness = 1.5, speedup = 1.5, time_ms = 1.65, "
        "review = 'accepted' where number = 1",
        (json.dumps(metrics),),
    )
    con.commit()
    con.close()
    rs = ReadStore(tmp_path)
    report = build_report(rs, "r")
    rs.close()
    rows = {c["name"]: c for c in report["best"]["configs"]}
    assert rows["big"]["efficiency"] == pytest.approx(0.8) and rows["big"]["efficiency_kind"] == OVERLAP
    assert rows["small"]["efficiency"] is None and rows["small"]["efficiency_kind"] == COMPUTE_CHANGED
    assert rows["small"]["own_compute_ms"] == pytest.approx(0.045)
    assert rows["small"]["efficiency_label"] == "compute changed, own compute 0.045 ms"
    assert {c["name"]: c["efficiency_label"] for c in report["best_per_config"]}["small"].startswith("compute changed")
