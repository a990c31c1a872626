"""What one config's benchmark numbers say about overlap, read the same way by `cuco report`, the TUI and
tests/gpu/efficiency_table.py.

The overlap bound max(T_comp, T_comm) is made of the baseline's own compute-only and communication-only
times: the best a perfect overlap of the baseline's work can reach. A candidate that changes the
computation itself (split-K on a small GEMM, a faster expert GEMM) can beat it, and then
(T_base - T_cand) / (T_base - bound) is above 1 and measures no overlap at all. Such a config is reported
as "compute changed", with the candidate's own compute time where its profiled call's timeline has one,
and no efficiency. A candidate within the bound's noise margin (harness_result.BOUND_MARGIN: the bound
holds the baseline's own sync, which an overlapped schedule may skip) is at the bound: efficiency 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..contract import interval_of
from .harness_result import BOUND_MARGIN, overlap_efficiency

OVERLAP = "overlap"
COMPUTE_CHANGED = "compute changed"


@dataclass(frozen=True)
class ConfigEfficiency:
    kind: str | None  # OVERLAP, COMPUTE_CHANGED, or None: no usable bound
    efficiency: float | None  # OVERLAP only: the share of the overlap window saved, at most 1
    own_compute_ms: float | None = None  # COMPUTE_CHANGED: the candidate's compute busy time (slowest rank)
    interval: tuple[float, float] | None = None  # OVERLAP: the efficiency at the speedup interval's two ends

    @property
    def meets(self) -> float | None:
        """The number to rank or threshold by: the efficiency, or 1 where the candidate beat every overlap
        of the baseline's work by more than the noise margin; None without a bound."""
        if self.kind == COMPUTE_CHANGED:
            return 1.0
        return self.efficiency

    def label(self) -> str:
        if self.kind == OVERLAP and self.efficiency is not None:
            return f"{self.efficiency:.2f}"
        if self.kind == COMPUTE_CHANGED:
            own = f", own compute {self.own_compute_ms:.3g} ms" if self.own_compute_ms is not None else ""
            return f"compute changed{own}"
        return "n/a"

    def label_with_spread(self) -> str:
        """The label, and the efficiency's interval after it where there is one."""
        if self.kind == OVERLAP and self.interval is not None:
            return f"{self.label()} [{self.interval[0]:.2f}-{self.interval[1]:.2f}]"
        return self.label()

    def as_dict(self) -> dict[str, Any]:
        return {
            "efficiency": None if self.efficiency is None else round(self.efficiency, 3),
            "efficiency_kind": self.kind,
            "own_compute_ms": None if self.own_compute_ms is None else round(self.own_compute_ms, 4),
            "efficiency_interval": None if self.interval is None else [round(x, 3) for x in self.interval],
        }


def own_compute_ms(timeline_figures: dict[str, Any] | None) -> float | None:
    """The candidate's compute busy time on its slowest rank, from its profiled call's timeline figures
    (engine/timeline.figures); None without a timeline. A kernel that moves data itself counts as compute
    there, so for a fused kernel this is an upper bound of its compute alone."""
    ranks = (timeline_figures or {}).get("ranks") if isinstance(timeline_figures, dict) else None
    times = [r.get("compute_ms") for r in ranks or [] if isinstance(r, dict)]
    measured = [t for t in times if isinstance(t, (int, float)) and t > 0]
    return max(measured) if measured else None


def judge(config: dict[str, Any], timeline_figures: dict[str, Any] | None = None) -> ConfigEfficiency:
    """One config's verdict from its benchmark numbers (baseline_ms, candidate_ms, comp_ms, comm_ms) and,
    where there is one, the timeline figures of the candidate's profiled call of that config."""
    eff = overlap_efficiency(config)
    if eff is None:
        return ConfigEfficiency(None, None)
    bound = max(config["comp_ms"], config["comm_ms"])
    if config["candidate_ms"] < (1.0 - BOUND_MARGIN) * bound:
        return ConfigEfficiency(COMPUTE_CHANGED, None, own_compute_ms(timeline_figures))
    return ConfigEfficiency(OVERLAP, min(eff, 1.0), interval=efficiency_interval(config))


def efficiency_interval(config: dict[str, Any]) -> tuple[float, float] | None:
    """The efficiency at the two ends of the config's speedup interval (the candidate's time read as
    baseline / speedup): efficiency rises with the speedup, so the ends map to the ends; capped at 1 like
    the efficiency. None without an interval or a usable bound."""
    pair = interval_of(config.get("speedup_interval"))
    if pair is None or overlap_efficiency(config) is None:
        return None
    point = overlap_efficiency(config)
    ends = [overlap_efficiency({**config, "candidate_ms": config["baseline_ms"] / s}) for s in pair]
    if point is None or ends[0] is None or ends[1] is None:
        return None
    # the point is the medians' (baseline over candidate time), the ends the ratios': the interval holds both
    return min(ends[0], point, 1.0), min(max(ends[1], point), 1.0)
