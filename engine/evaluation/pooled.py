"""Several benchmark jobs of one candidate read as one measurement: their rounds pooled per config.

A re-measurement (a would-be new best, a result beyond the overlap bound) adds rounds taken in a fresh process
on fresh inputs; the speedup is then the median of all the rounds together (protocol.py), not biased low as
keeping the lower of two medians is, and its interval spans the pooled rounds' and every job's own.
"""

from __future__ import annotations

import copy
import statistics
from typing import Any

from ..contract import interval_of
from .harness_result import HarnessResult
from .protocol import median, median_interval


def _pooled_config(configs: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(configs[0])
    rounds = [r for c in configs for r in c.get("rounds") or []]
    ratios = [r[0] / r[1] for r in rounds]
    if not ratios or len(rounds) != sum(len(c.get("rounds") or []) for c in configs):
        return out
    interval = median_interval(ratios)
    # Jobs differ by more than their rounds say (where each process's threads and pages landed: the demo's
    # seed read 0.89-1.05 against its own copy from job to job, each job's interval a few % wide), so the
    # pooled interval spans every job's own as well as the pooled rounds'.
    for c in configs:
        own = interval_of(c.get("speedup_interval"))
        if interval is not None and own is not None:
            interval = (min(interval[0], own[0]), max(interval[1], own[1]))
    out["rounds"] = rounds
    out["speedup"] = median(ratios)
    out["speedup_interval"] = list(interval) if interval else None
    out["baseline_ms"] = median([r[0] for r in rounds])
    out["candidate_ms"] = median([r[1] for r in rounds])
    for key in ("comp_ms", "comm_ms"):  # the bound's parts: each job's median, their median
        parts = [c[key] for c in configs if isinstance(c.get(key), (int, float))]
        if parts:
            out[key] = float(statistics.median(parts))
    out["jobs"] = len(configs)
    return out


def pooled(results: list[HarnessResult]) -> HarnessResult:
    """One result from several benchmark jobs of the same candidate (same configs, each with its rounds);
    a config some job took without rounds (a harness from before them) keeps the first job's numbers."""
    if len(results) == 1:
        return results[0]
    first = results[0]
    configs = [_pooled_config([r.configs[i] for r in results]) for i in range(len(first.configs))]
    raw = {**first.raw, "configs": configs, "timed_ms": sum(float(r.raw.get("timed_ms") or 0) for r in results)}
    return HarnessResult(first.mode, first.correct, first.error, configs, first.env, raw, first.timelines)
