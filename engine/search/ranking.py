"""How candidates are compared: by the lower end of their speedup's 95 % interval.

A candidate measured 1.30x [1.05-1.60] is not known to beat one measured 1.20x [1.17-1.23]: ranking by the
lower bound prefers the number a re-measurement is likely to confirm, so the best, the archive's elites, the
islands' elites and the parents are not crowned by one lucky measurement. A result without an interval (a
harness from before intervals) ranks by its speedup.

The finalists re-measured side by side before a run ends (engine/run/finalist_step.py) rank by their re-measured
median instead: their jobs were taken in turns through the same stretch of the machine's load, so their
medians compare fairly, while each interval also spans the job-to-job spread (a few % on a busy machine),
which is noise common to them all; by its lower end the narrowest, not the fastest, would win.
"""

from __future__ import annotations

from typing import Any

from ..contract import interval_of


def fitness(speedup: float | None, interval: Any) -> float | None:
    """The number candidates rank by: the interval's lower end, or the speedup without one."""
    if speedup is None:
        return None
    pair = interval_of(interval)
    return pair[0] if pair is not None else speedup


def remeasured_fitness(speedup: float | None) -> float | None:
    """The number a finalist re-measured side by side ranks by: its median over the side-by-side jobs."""
    return speedup
