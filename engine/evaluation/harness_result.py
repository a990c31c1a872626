"""Read the harness's result.json. Only this file is believed: never the candidate's stdout.

A result that is missing, not JSON, or lacks a field is a failure with a reason, not a crash.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from ..contract import interval_of
from ..stages import BENCHMARK
from ..timeline.timeline import take_from_result
from .protocol import combined_interval


class ResultError(ValueError):
    pass


# 10 %: the bound's parts are the baseline's own, sync included (a barrier before its copies, wake-ups),
# which an overlapped schedule may legitimately skip: the demo's best sits 1-3 % under its communication-only
# time while moving its bytes at the link's modelled rate (9 % before the link landed bytes progressively).
# Clearly beyond is flagged.
BOUND_MARGIN = 0.10


def _positive(v: Any) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _bound(config: dict[str, Any]) -> tuple[float, float, float] | None:
    """(T_base, T_cand, T_bound = max(T_comp, T_comm)) of one config, or None when the bound is not usable:
    a part missing, or measured no shorter than the whole baseline (compute-only or communication-only
    taking longer than both together is a noisy sample on a busy machine, not a bound to judge against)."""
    base, cand, comp, comm = (config.get(k) for k in ("baseline_ms", "candidate_ms", "comp_ms", "comm_ms"))
    if not (_positive(base) and _positive(cand) and _positive(comp) and _positive(comm)):
        return None
    bound = max(comp, comm)
    return (base, cand, bound) if bound < base else None


def overlap_efficiency(config: dict[str, Any]) -> float | None:
    """(T_base - T_cand) / (T_base - max(T_comp, T_comm)) of one config's benchmark numbers: the share of the
    time a perfect overlap of the baseline's own compute and communication could save that the candidate
    saved. 1 is the bound; above 1 is a faster computation (see `beyond_bound`); None without a usable bound."""
    parts = _bound(config)
    if parts is None:
        return None
    base, cand, bound = parts
    return (base - cand) / (base - bound)


@dataclass
class HarnessResult:
    mode: str
    correct: bool
    error: str | None
    configs: list[dict[str, Any]]
    env: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    timelines: dict[str, dict[str, Any]] = field(default_factory=dict)  # the profiled call's, per config

    @property
    def speedup(self) -> float | None:
        """The geometric mean of the per-config A B A B ratios."""
        ratios = [c["speedup"] for c in self.configs if c.get("speedup")]
        if not ratios:
            return None
        return math.exp(sum(math.log(r) for r in ratios) / len(ratios))

    @property
    def speedup_interval(self) -> tuple[float, float] | None:
        """The 95 % interval of `speedup`, from the configs' (protocol.combined_interval); None when a
        measured config has none (a harness from before intervals)."""
        measured = [c for c in self.configs if c.get("speedup")]
        intervals = [interval_of(c.get("speedup_interval")) for c in measured]
        if not measured or any(i is None for i in intervals):
            return None
        return combined_interval([i for i in intervals if i is not None])

    def rounds(self, config: str) -> list[float]:
        """One config's per-round ratios (baseline / candidate), as the harness took them; [] without rounds."""
        for c in self.configs:
            if c.get("name") == config:
                return [r[0] / r[1] for r in c.get("rounds") or [] if _round(r)]
        return []

    @property
    def time_ms(self) -> float | None:
        times = [c["candidate_ms"] for c in self.configs if c.get("candidate_ms") is not None]
        return sum(times) if times else None

    @property
    def baseline_ms(self) -> float | None:
        times = [c["baseline_ms"] for c in self.configs if c.get("baseline_ms") is not None]
        return sum(times) if times else None

    def beyond_bound(self, margin: float = BOUND_MARGIN) -> list[dict[str, Any]]:
        """Configs where the candidate beat the overlap bound: faster than max(compute-only, communication-
        only) of the baseline, the best a perfect overlap of the baseline's own work can reach. That is a
        different (faster) computation or a measurement the candidate gamed: flagged for a person to judge,
        never rejected. `margin` keeps timing noise from flagging a candidate that merely reached it, and so
        does the interval: the candidate is judged at the slow end of its speedup's interval (its time scaled
        by speedup / low), beyond the bound only if even that is. A config without a usable bound (see
        `_bound`) is not judged."""
        flags = []
        for c in self.configs:
            parts = _bound(c)
            if parts is None:
                continue
            _, cand, bound_ms = parts
            pair = interval_of(c.get("speedup_interval"))
            if pair is not None and _positive(c.get("speedup")) and pair[0] > 0:
                cand = cand * c["speedup"] / pair[0]
            if cand < (1.0 - margin) * bound_ms:
                flags.append(
                    {
                        "kind": "beyond_overlap_bound",
                        "config": c.get("name"),
                        "candidate_ms": cand,
                        "bound_ms": bound_ms,
                    }
                )
        return flags

    def mismatch_summary(self) -> str:
        for c in self.configs:
            if not c.get("correct"):
                m = c.get("mismatch")
                if m:
                    return (
                        f"config {c.get('name')}: wrong {m.get('what', 'output')} on rank {m.get('rank')} "
                        f"at index {m.get('index')} (expected {m.get('expected')}, got {m.get('got')})"
                    )
                if c.get("error"):
                    return f"config {c.get('name')}: {c['error']}"
        return self.error or "incorrect output"


def _round(value: Any) -> bool:
    return isinstance(value, list) and len(value) >= 2 and _positive(value[0]) and _positive(value[1])


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ResultError(f"{where} must be a positive number (got {value!r})")
    return float(value)


def parse_result(data: bytes | None, mode: str, expected_configs: list[str], nonce: str | None = None) -> HarnessResult:
    if data is None:
        raise ResultError("the harness wrote no result.json (it crashed, was killed, or exited early)")
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultError(f"result.json is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ResultError("result.json must hold an object")
    if raw.get("mode") != mode:
        raise ResultError(f"result.json is for mode {raw.get('mode')!r}, expected {mode!r}")
    correct = raw.get("correct")
    if not isinstance(correct, bool):
        raise ResultError("result.json: 'correct' must be true or false")
    configs = raw.get("configs")
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        raise ResultError("result.json: 'configs' must be a list of objects")
    if nonce is not None and raw.get("nonce") != nonce:
        raise ResultError(
            "result.json does not carry this job's nonce: it was not written by the harness "
            "(or the harness did not finish)"
        )
    error = raw.get("error")
    result = HarnessResult(
        mode, correct, str(error) if error else None, configs, raw.get("env") or {}, raw, take_from_result(raw)
    )  # out of raw: the stored result stays small
    if not correct:
        return result
    names = [c.get("name") for c in configs]
    if names != expected_configs:
        raise ResultError(f"result.json covers configs {names}, expected {expected_configs}")
    if any(c.get("correct") is not True for c in configs):
        raise ResultError("result.json says correct but a config is not")
    if mode == BENCHMARK:
        for c in configs:
            for key in ("baseline_ms", "candidate_ms", "speedup"):
                c[key] = _number(c.get(key), f"config {c.get('name')}: {key}")
            if "speedup_interval" in c:
                pair = interval_of(c["speedup_interval"])
                if pair is None or not pair[0] <= c["speedup"] <= pair[1]:
                    raise ResultError(
                        f"config {c.get('name')}: speedup_interval must be [low, high] around the speedup "
                        f"(got {c['speedup_interval']!r} for {c['speedup']!r})"
                    )
    return result
