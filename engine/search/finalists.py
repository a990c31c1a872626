"""Which candidates are re-measured side by side before a run's best is named: the top of the ranking by its
lower bound, the top by the speedup itself (a fast candidate whose interval came out wide in one noisy job
still gets its fair hearing), and the seed (its reading against its own copy shows what the machine's noise
does to a number)."""

from __future__ import annotations

from .population import Cand, Population, fitness

BY_LOWER_BOUND = 3
BY_SPEEDUP = 3


def finalists(
    population: Population, seed_id: int | None, k_bound: int = BY_LOWER_BOUND, k_speedup: int = BY_SPEEDUP
) -> list[Cand]:
    """The `k_bound` eligible candidates of highest fitness, then those of the `k_speedup` highest speedups not
    among them, then the seed when it counts and is not among them."""
    eligible = list(population.eligible.values())
    top = sorted(eligible, key=lambda c: (-fitness(c), c.id))[:k_bound]
    for c in sorted(eligible, key=lambda c: (-(c.speedup or 0.0), c.id))[:k_speedup]:
        if c not in top:
            top.append(c)
    seed = population.eligible.get(seed_id) if seed_id is not None else None
    if seed is not None and seed not in top:
        top.append(seed)
    return top
