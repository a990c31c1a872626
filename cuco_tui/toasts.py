"""What deserves a toast: a new best, a node lost or quarantined, a candidate waiting for a person's review.

Fed with engine events (engine/contract.py), the engine's node states (status replies) and what the store says
(node states, candidates whose `review` is `needs_review`); remembers what it already announced, so a state seen again (each summary reload, a
replayed event) is not announced twice. Returns (text, severity) pairs; the app shows them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from engine.contract import Best, Event, Result

Toast = tuple[str, str]  # (text, severity: information | warning | error)
NEEDS_REVIEW = "needs_review"


def node_trouble(node: dict[str, Any]) -> str | None:
    """'quarantined', 'lost' or None (healthy)."""
    if node.get("quarantined"):
        return "quarantined"
    if node.get("healthy") is False:
        return "lost"
    return None


class ToastWatcher:
    def __init__(self) -> None:
        self._best: int | None = None
        self._node_trouble: dict[str, str | None] = {}
        self._reviews: set[int] = set()

    def event(self, event: Event) -> list[Toast]:
        if isinstance(event, Best):
            return self.best(event.id, event.speedup)
        if isinstance(event, Result) and event.review == NEEDS_REVIEW and event.id is not None:
            return self.reviews([int(event.id)])
        return []

    def know_best(self, candidate_id: Any) -> None:
        """The best as the store had it when the app opened: known, not news."""
        if self._best is None:
            self._best = candidate_id

    def best(self, candidate_id: Any, speedup: Any) -> list[Toast]:
        if candidate_id is None or candidate_id == self._best:
            return []
        self._best = candidate_id
        ratio = f" {speedup:.3f}x" if isinstance(speedup, (int, float)) else ""
        return [(f"new best #{candidate_id}{ratio} (b jumps to it)", "information")]

    def nodes(self, nodes: Iterable[dict[str, Any]]) -> list[Toast]:
        out: list[Toast] = []
        for node in nodes:
            name = str(node.get("name", "?"))
            trouble = node_trouble(node)
            if trouble and self._node_trouble.get(name) != trouble:
                detail = f": {node['detail']}" if node.get("detail") else ""
                out.append((f"node {name} {trouble}{detail}", "error" if trouble == "lost" else "warning"))
            self._node_trouble[name] = trouble
        return out

    def reviews(self, candidate_ids: Iterable[int]) -> list[Toast]:
        new = sorted(set(candidate_ids) - self._reviews)
        if not new:
            return []
        self._reviews.update(new)
        shown = ", ".join(f"#{cid}" for cid in new[:5]) + (" ..." if len(new) > 5 else "")
        what = "a candidate waits" if len(new) == 1 else f"{len(new)} candidates wait"
        return [(f"{what} for your review: {shown} (a accepts, x rejects)", "warning")]
