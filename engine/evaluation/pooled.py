"""Several benchmark jobs of one candidate read as one measurement: their rounds pooled per config.

A re-measurement (a would-be new best, a result beyond the overlap bound) adds rounds taken in a fresh process
on fresh inputs; the speedup and its interval are then those of all the rounds together (protocol.py), which
is both more precise than either job and not biased low, as keeping the lower of two medians is.
"""

from __future__ import annotations

import copy
import statistics
from typing import Any

from .harness_result import HarnessResult
from .protocol import median, median_interval


def _pooled_config(configs: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(configs[0])
    rounds = [r for c in configs for r in c.get("rounds") or []]
    ratios = [r[0] / r[1] for r in rounds]
    if not ratios or len(rounds) != sum(len(c.get("rounds") or []) for c in configs):
        return out
    interval = median_interval(ratios)
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
