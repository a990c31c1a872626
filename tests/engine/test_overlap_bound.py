"""The overlap bound judged from one config's harness numbers: a candidate clearly under max(compute-only,
communication-only) of the baseline is flagged and its efficiency is over 1; a bound whose part was measured
longer than the whole baseline (a noisy sample: seen on the 2-core box, compute-only 4.47 ms against a
4.17 ms baseline) judges nothing: no flag, no efficiency."""

from __future__ import annotations

import pytest

from engine.evaluation.harness_result import HarnessResult, overlap_efficiency


def config(name: str, base: float, cand: float, comp: float, comm: float) -> dict:
    return {
        "name": name,
        "correct": True,
        "baseline_ms": base,
        "candidate_ms": cand,
        "comp_ms": comp,
        "comm_ms": comm,
        "speedup": base / cand,
    }


def test_a_candidate_beyond_a_sound_bound_is_flagged():
    c = config("square", 12.0, 5.0, 3.0, 7.0)  # bound 7.0 ms, the candidate 29 % under it
    assert overlap_efficiency(c) == pytest.approx((12.0 - 5.0) / (12.0 - 7.0))
    flags = HarnessResult("benchmark", True, None, [c]).beyond_bound()
    assert flags == [{"kind": "beyond_overlap_bound", "config": "square", "candidate_ms": 5.0, "bound_ms": 7.0}]


def test_a_candidate_at_the_bound_is_not_flagged():
    c = config("square", 12.0, 6.5, 3.0, 7.0)  # 7 % under: within the margin
    assert HarnessResult("benchmark", True, None, [c]).beyond_bound() == []
    assert overlap_efficiency(c) == pytest.approx(1.1)


def test_a_bound_measured_longer_than_the_baseline_judges_nothing():
    noisy = config("tall", 4.166, 2.752, 4.468, 2.817)  # the acceptance run's numbers
    sound = config("square", 9.430, 6.638, 4.662, 6.714)
    result = HarnessResult("benchmark", True, None, [noisy, sound])
    assert overlap_efficiency(noisy) is None
    assert result.beyond_bound() == []  # was a "beyond the bound" flag on tall
    assert overlap_efficiency(sound) == pytest.approx((9.430 - 6.638) / (9.430 - 6.714))
