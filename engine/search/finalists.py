"""Which candidates are re-measured side by side before a run's best is named: the top of the ranking and
the seed (its reading against its own copy shows what the machine's noise does to a number)."""

from __future__ import annotations

from .population import Cand, Population, fitness

FINALISTS = 3  # besides the seed


def finalists(population: Population, seed_id: int | None, k: int = FINALISTS) -> list[Cand]:
    """The `k` eligible candidates of highest fitness, then the seed when it counts and is not among them."""
    top = sorted(population.eligible.values(), key=lambda c: (-fitness(c), c.id))[:k]
    seed = population.eligible.get(seed_id) if seed_id is not None else None
    if seed is not None and seed not in top:
        top.append(seed)
    return top
