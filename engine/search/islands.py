"""Islands and their migration graph (a ring): members are rebuilt from the store on resume."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Island:
    index: int
    members: list[int] = field(default_factory=list)  # candidate ids, in arrival order
    last_migration: int | None = None  # evaluation count at the last migration in


class IslandModel:
    def __init__(self, count: int):
        self.islands = [Island(i) for i in range(count)]

    def __len__(self) -> int:
        return len(self.islands)

    def add(self, island: int, candidate_id: int) -> None:
        members = self.islands[island].members
        if candidate_id not in members:
            members.append(candidate_id)

    def edges(self) -> list[tuple[int, int]]:
        """The ring: island i sends its elites to island i+1."""
        n = len(self.islands)
        return [(i, (i + 1) % n) for i in range(n)] if n > 1 else []

    def pick_island(self, proposal_number: int) -> int:
        """Round-robin keeps islands evenly fed and is reproducible across restarts."""
        return proposal_number % len(self.islands)
