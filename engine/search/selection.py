"""Parent selection among an island's eligible members (correct, not rejected)."""

from __future__ import annotations

import functools
import itertools
import math
import random
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def power_law(items: Sequence[T], fitness: Sequence[float], rng: random.Random, alpha: float = 1.5) -> T:
    """Rank by fitness (best first); rank k is drawn with probability proportional to k^-alpha."""
    order = sorted(range(len(items)), key=fitness.__getitem__, reverse=True)  # stable: ties keep their order
    return items[order[power_law_rank(len(order), rng, alpha)]]


def power_law_rank(n: int, rng: random.Random, alpha: float = 1.5) -> int:
    """A rank in [0, n), rank k with probability proportional to (k+1)^-alpha."""
    return rng.choices(range(n), cum_weights=_cumulative_weights(n, alpha), k=1)[0]


@functools.lru_cache(maxsize=64)
def _cumulative_weights(n: int, alpha: float) -> tuple[float, ...]:
    return tuple(itertools.accumulate((k + 1) ** -alpha for k in range(n)))


def weighted(
    items: Sequence[T], fitness: Sequence[float], rng: random.Random, children: Sequence[int] | None = None
) -> T:
    """Sigmoid of the fitness around the median, damped by how many children a member already has
    (ShinkaEvolve's 'weighted'): good parents are favoured without starving the rest."""
    fs = sorted(fitness)
    mid = fs[len(fs) // 2]
    spread = (fs[-1] - fs[0]) or 1.0
    weights = []
    for i, f in enumerate(fitness):
        w = 1.0 / (1.0 + math.exp(-10.0 * (f - mid) / spread))
        if children is not None:
            w /= 1.0 + children[i]
        weights.append(max(w, 1e-6))
    return items[rng.choices(range(len(items)), weights=weights, k=1)[0]]
