"""The population's one admit/withdraw rule: a candidate that counts is eligible, its cell's elite if it
beats it, the best if it beats it; a rejected one hands its cell to the cell's next-best and the best to
the best one left, and an accepted one comes back."""

from __future__ import annotations

from engine.search.population import Cand, Population
from engine.store.schema import DONE, FAILED


def cand(cid: int, cell: str, fitness: float | None, status: str = DONE) -> Cand:
    return Cand(
        id=cid,
        number=cid,
        island=0,
        generation=1,
        status=status,
        source_hash=f"h{cid}",
        descriptor={},
        cell=cell,
        operator="knob",
        fitness=fitness,
        speedup=fitness,
    )


def test_admit_reject_accept_keep_archive_and_best_consistent():
    pop = Population()
    a, b, c, bad = cand(1, "x", 1.2), cand(2, "x", 1.5), cand(3, "y", 1.4), cand(4, "x", None, FAILED)
    admitted = {}
    for k in (a, b, c, bad):
        pop.add(k)
        admitted[k.id] = pop.admit(k)
    assert admitted[1].archived and admitted[1].best
    assert admitted[2].archived and admitted[2].best
    assert not admitted[3].best and admitted[3].archived  # its own cell, slower than the best
    assert not admitted[4].eligible and 4 not in pop.eligible  # a failure never counts
    assert pop.best is b and pop.archive.cells["x"].candidate_id == 2

    pop.reject(b, "gamed the timer")
    assert pop.best is c  # the best one left
    assert pop.archive.cells["x"].candidate_id == 1  # the cell's next-best
    assert b.id in pop.rejected and b.id not in pop.eligible

    pop.reject(a, "no")
    assert "x" not in pop.archive.cells and pop.best is c  # nothing eligible left in the cell

    back = pop.accept(b)
    assert back.best and back.archived and pop.best is b and b.id not in pop.rejected
