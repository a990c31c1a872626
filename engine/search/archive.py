"""The MAP-Elites archive: the best eligible candidate of each design-space cell."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Elite:
    candidate_id: int
    fitness: float


class Archive:
    def __init__(self) -> None:
        self.cells: dict[str, Elite] = {}

    def offer(self, cell: str, candidate_id: int, fitness: float) -> bool:
        """Keep the candidate if its cell is empty or it beats the elite; True when it was kept."""
        current = self.cells.get(cell)
        if current is None or fitness > current.fitness:
            self.cells[cell] = Elite(candidate_id, fitness)
            return True
        return False

    def remove(self, candidate_id: int) -> str | None:
        for cell, elite in list(self.cells.items()):
            if elite.candidate_id == candidate_id:
                del self.cells[cell]
                return cell
        return None

    def elites(self) -> list[Elite]:
        return sorted(self.cells.values(), key=lambda e: -e.fitness)

    def __len__(self) -> int:
        return len(self.cells)
