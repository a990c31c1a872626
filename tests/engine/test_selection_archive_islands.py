"""Parent selection, the MAP-Elites archive and the island ring (engine/search/selection.py, archive.py, islands.py)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from engine.search.archive import Archive
from engine.search.islands import IslandModel
from engine.search.selection import power_law, weighted

DRAWS = 4000


def draws(pick, seed: int, n: int = DRAWS) -> Counter:
    """n picks with ONE seeded rng (deterministic, but a real sequence of draws)."""
    rng = random.Random(seed)
    return Counter(pick(rng) for _ in range(n))


def test_power_law_favours_the_best_deterministically():
    items = ["a", "b", "c", "d", "e", "f"]
    fitness = [1.0, 5.0, 2.0, 0.5, 3.0, 0.1]  # best: b, worst: f
    counts = draws(lambda rng: power_law(items, fitness, rng), 1234)
    assert counts["b"] > 8 * counts["f"], counts
    # Ranks come out in fitness order.
    ranked = sorted(items, key=lambda x: -fitness[items.index(x)])
    freq = [counts[x] for x in ranked]
    assert freq[0] > freq[1] > freq[2], counts
    assert freq[0] / DRAWS == pytest.approx(1 / sum((k + 1) ** -1.5 for k in range(6)), abs=0.04)
    # Everyone still gets picked sometimes (no starvation).
    assert all(counts[x] > 0 for x in items)
    # Same seed, same draws.
    again = draws(lambda rng: power_law(items, fitness, rng), 1234)
    assert again == counts


def test_power_law_alpha_sharpens():
    items = list(range(5))
    fitness = [0.0, 1.0, 2.0, 3.0, 4.0]
    soft = draws(lambda rng: power_law(items, fitness, rng, alpha=0.5), 7)
    sharp = draws(lambda rng: power_law(items, fitness, rng, alpha=3.0), 7)
    assert sharp[4] > soft[4] and sharp[0] < soft[0]


def test_power_law_single_item():
    assert power_law(["only"], [1.0], random.Random(0)) == "only"


def test_weighted_favours_fitness():
    items = ["lo", "mid", "hi"]
    counts = draws(lambda rng: weighted(items, [1.0, 2.0, 3.0], rng), 5)
    assert counts["hi"] > counts["mid"] > counts["lo"], counts


def test_weighted_damps_parents_with_many_children():
    items = ["busy", "fresh"]
    fitness = [2.0, 2.0]
    no_children = draws(lambda rng: weighted(items, fitness, rng), 9)
    assert abs(no_children["busy"] - no_children["fresh"]) < DRAWS * 0.08  # equal fitness, equal odds
    damped = draws(lambda rng: weighted(items, fitness, rng, children=[9, 0]), 9)
    assert damped["fresh"] > 5 * damped["busy"], damped
    # The damping is 1 / (1 + children): one child halves a member's odds.
    one = draws(lambda rng: weighted(items, fitness, rng, children=[1, 0]), 11)
    assert 1.6 < one["fresh"] / one["busy"] < 2.5, one


def test_weighted_equal_fitness_does_not_crash():
    assert weighted(["x", "y", "z"], [1.0, 1.0, 1.0], random.Random(0)) in ("x", "y", "z")


# ----- archive ------------------------------------------------------------------------------------


def test_archive_keeps_the_better_per_cell():
    a = Archive()
    assert a.offer("p=seq", 1, 1.0) is True
    assert a.offer("p=seq", 2, 0.8) is False  # worse: refused
    assert a.offer("p=seq", 3, 1.0) is False  # a tie keeps the incumbent
    assert a.offer("p=fused", 4, 0.5) is True  # another cell
    assert a.offer("p=seq", 5, 1.7) is True  # better: replaces
    assert len(a) == 2
    assert {c: e.candidate_id for c, e in a.cells.items()} == {"p=seq": 5, "p=fused": 4}
    assert [e.candidate_id for e in a.elites()] == [5, 4]  # best first


def test_archive_remove():
    a = Archive()
    a.offer("c1", 10, 2.0)
    a.offer("c2", 11, 1.0)
    assert a.remove(10) == "c1"
    assert a.remove(10) is None  # already gone
    assert a.remove(999) is None
    assert len(a) == 1 and "c1" not in a.cells
    # The emptied cell takes a newcomer even if it is worse than the removed elite.
    assert a.offer("c1", 12, 0.1) is True
    assert a.cells["c1"].candidate_id == 12


# ----- islands ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n,edges",
    [
        (1, []),
        (2, [(0, 1), (1, 0)]),
        (4, [(0, 1), (1, 2), (2, 3), (3, 0)]),
    ],
)
def test_island_ring_edges(n, edges):
    m = IslandModel(n)
    assert len(m) == n
    assert m.edges() == edges
    # Every island sends exactly once and receives exactly once (a ring), none to itself.
    if n > 1:
        assert sorted(s for s, _ in edges) == list(range(n)) == sorted(d for _, d in edges)
        assert all(s != d for s, d in edges)


def test_island_round_robin_and_add():
    m = IslandModel(3)
    assert [m.pick_island(i) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    m.add(1, 42)
    m.add(1, 42)
    m.add(1, 7)
    assert m.islands[1].members == [42, 7] and m.islands[0].members == []
