"""The measurement protocol: how many A/B rounds a benchmark runs, and the interval of a ratio.

The harness times baseline and candidate in rounds (one call of each, back to back, the order drawn at random
for each pair of rounds) and keeps the per-round ratio baseline / candidate. The speedup is the median of
those ratios; its 95 % interval comes from order statistics (distribution-free: no assumption on the noise's
shape, and a burst that hits a few rounds moves neither end much). Rounds go on past the workload's `iters`
until the interval is narrower than TARGET_WIDTH of the median, or MAX_ROUNDS_FACTOR times `iters` have run.
The harnesses compute the same interval (`ratio_interval` in each); this module pools rounds across jobs
(a re-measurement) and combines configs into a candidate's interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

TARGET_WIDTH = 0.06  # (high - low) / median at which a benchmark stops adding rounds
MAX_ROUNDS_FACTOR = 4  # the cap: this many times the workload's `iters`
CONFIDENCE_TAIL = 0.025  # each side's tail: a 95 % interval


def rounds_spec(iters: int) -> dict[str, float]:
    """The harness's spec fields that make its A/B loop adaptive."""
    return {"max_iters": iters * MAX_ROUNDS_FACTOR, "target_width": TARGET_WIDTH}


def median_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """The 95 % interval of the median of `values`: [x(k), x(n+1-k)] for the largest k with
    P(Bin(n, 1/2) < k) <= 2.5 % (the whole range below 6 values, where no k qualifies); None when empty."""
    v = sorted(values)
    n = len(v)
    if n == 0:
        return None
    cdf, k = 0.0, 0
    for j in range(n):
        cdf += math.comb(n, j) / 2.0**n
        if cdf > CONFIDENCE_TAIL:
            break
        k = j + 1
    return v[max(0, k - 1)], v[n - max(1, k)]


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(x) for x in values) / len(values))


def combined_interval(intervals: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """A candidate's interval from its configs' (its speedup is their geometric mean): the geometric means
    of the lows and of the highs. Conservative: the configs' errors are not assumed to cancel."""
    if not intervals:
        return None
    return geometric_mean([lo for lo, _ in intervals]), geometric_mean([hi for _, hi in intervals])


def narrow(value: float | None, interval: tuple[float, float] | None) -> bool:
    """The interval met the target width: its rounds absorbed whatever load there was."""
    return (
        value is not None and interval is not None and value > 0 and (interval[1] - interval[0]) / value <= TARGET_WIDTH
    )


def contains(interval: tuple[float, float] | None, value: float) -> bool:
    return interval is not None and interval[0] <= value <= interval[1]


def separated(better: tuple[float, float] | None, worse: tuple[float, float] | None) -> bool:
    """`better`'s interval lies wholly above `worse`'s: the two are told apart beyond the noise."""
    return better is not None and worse is not None and better[0] > worse[1]
