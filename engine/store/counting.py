"""What counts in a run: which candidates may be its best, a parent or an inspiration, which wait for a
person first, and which must be measured again before they count.

A result faster than its workload's overlap bound (or flagged otherwise) is either a computation the
workload did not anticipate or a measurement the candidate gamed; the harness cannot tell which. It is
verified and stored, but it does not steer the search (best, parent, inspiration, archive) until someone
accepts it (`a` in the TUI's review queue, or `cuco accept`). A rejected candidate never counts.
"""

from __future__ import annotations

from typing import Any

from .schema import DONE

NEEDS_REVIEW, ACCEPTED, REJECTED = "needs_review", "accepted", "rejected"

# The same rule for readers of the store (report, archive, fork): `c` is the candidates table.
COUNTS_SQL = (
    f"c.status='{DONE}' AND c.fitness IS NOT NULL AND COALESCE(c.review, '') != '{NEEDS_REVIEW}' AND "
    "COALESCE((SELECT verdict FROM marks m WHERE m.candidate_id=c.id ORDER BY m.id DESC LIMIT 1), '') "
    "!= 'reject'"
)


def review_state(status: str, metrics: dict[str, Any] | None) -> str | None:
    """NEEDS_REVIEW for a correct result that carries a flag (beyond the overlap bound, or any other)."""
    return NEEDS_REVIEW if status == DONE and (metrics or {}).get("flags") else None


def counts(status: str, fitness: float | None, verdict: str | None, review: str | None) -> bool:
    """May be the best, a parent or an inspiration: correct, not rejected, and not waiting for a person
    (an accepted one always counts)."""
    if verdict == "reject" or status != DONE or fitness is None:
        return False
    return review != NEEDS_REVIEW or verdict == "accept"


def remeasure_before_best(speedup: float, best_speedup: float | None) -> bool:
    """Every would-be new best is benchmarked again in a fresh process (on new inputs) before it counts; the
    lower of the two measurements is kept."""
    return best_speedup is None or speedup > best_speedup
