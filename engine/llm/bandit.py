"""A UCB1 bandit over models, rewarding improvement per dollar.

An arm's value is its mean reward per call (the child's relative speedup gain over its parent, 0 for an
incorrect or failed child) divided by its mean cost per call (plus a floor, so free local models do not
divide by zero); values are normalised by the best arm, then the UCB exploration term is added. Arms
never tried go first. The state is plain JSON, kept in the store (`run_state`, key `bandit`) so a
resumed run picks up where it was.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..store.store import Store

STATE_KEY = "bandit"
COST_FLOOR_USD = 0.001  # per call: keeps free models comparable


@dataclass
class Arm:
    pulls: int = 0  # proposals that used this model
    rewarded: int = 0  # children of this model whose result was credited
    reward: float = 0.0  # sum of rewards
    cost_usd: float = 0.0  # sum of call costs


@dataclass
class Bandit:
    models: list[str]
    exploration: float = 1.0
    arms: dict[str, Arm] = field(default_factory=dict)
    credited: set[int] = field(default_factory=set)  # candidate ids already counted

    def __post_init__(self) -> None:
        for m in self.models:
            self.arms.setdefault(m, Arm())

    def value(self, model: str) -> float:
        arm = self.arms[model]
        if not arm.rewarded:
            return 0.0
        mean_reward = arm.reward / arm.rewarded
        mean_cost = arm.cost_usd / max(1, arm.pulls)
        return mean_reward / (mean_cost + COST_FLOOR_USD)

    def scores(self) -> dict[str, float]:
        total = sum(a.pulls for a in self.arms.values()) or 1
        values = {m: self.value(m) for m in self.models}
        best = max(values.values()) or 1.0
        out = {}
        for m in self.models:
            arm = self.arms[m]
            if arm.pulls == 0:
                out[m] = math.inf
            else:
                out[m] = values[m] / best + self.exploration * math.sqrt(2 * math.log(total) / arm.pulls)
        return out

    def select(self, rng: random.Random) -> str:
        if len(self.models) == 1:
            return self.models[0]
        scores = self.scores()
        top = max(scores.values())
        return rng.choice([m for m in self.models if scores[m] == top])

    def pulled(self, model: str) -> None:
        self.arms.setdefault(model, Arm()).pulls += 1

    def paid(self, model: str, cost_usd: float) -> None:
        self.arms.setdefault(model, Arm()).cost_usd += cost_usd

    def credit(self, candidate_id: int, model: str, reward: float) -> None:
        if candidate_id in self.credited:
            return
        self.credited.add(candidate_id)
        arm = self.arms.setdefault(model, Arm())
        arm.rewarded += 1
        arm.reward += max(0.0, reward)

    # Persistence

    def to_json(self) -> str:
        return json.dumps(
            {
                "models": self.models,
                "exploration": self.exploration,
                "arms": {m: asdict(a) for m, a in self.arms.items()},
                "credited": sorted(self.credited),
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str, models: list[str]) -> Bandit:
        data: dict[str, Any] = json.loads(text)
        arms = {m: Arm(**a) for m, a in data.get("arms", {}).items()}
        bandit = cls(
            models=list(models),
            exploration=float(data.get("exploration", 1.0)),
            arms=arms,
            credited=set(int(c) for c in data.get("credited", [])),
        )
        return bandit

    async def save(self, store: Store, run_id: str) -> None:
        async with store.transaction() as tx:
            await tx.execute(
                "INSERT OR REPLACE INTO run_state (run_id, key, value_json) VALUES (?,?,?)",
                (run_id, STATE_KEY, self.to_json()),
            )

    @classmethod
    async def load(cls, store: Store, run_id: str, models: list[str]) -> Bandit:
        row = await store.fetchone("SELECT value_json FROM run_state WHERE run_id=? AND key=?", (run_id, STATE_KEY))
        if row is None:
            return cls(models=list(models))
        return cls.from_json(row["value_json"], models)

    async def sync(self, store: Store, run_id: str) -> int:
        """Credit finished children of LLM models not yet counted; returns how many were credited."""
        rows = await store.fetchall(
            "SELECT c.id, c.mutator, c.status, c.speedup, p.speedup AS parent_speedup FROM candidates c "
            "LEFT JOIN candidates p ON p.id = c.parent_id WHERE c.run_id=? AND c.mutator LIKE 'llm:%' "
            "AND c.status IN ('done','incorrect','failed','refused')",
            (run_id,),
        )  # a refused child earns 0
        n = 0
        for r in rows:
            model = r["mutator"][len("llm:") :]
            if r["id"] in self.credited or model not in self.arms:
                continue
            self.credit(r["id"], model, reward_of(r["status"], r["speedup"], r["parent_speedup"]))
            n += 1
        return n


def reward_of(status: str, speedup: float | None, parent_speedup: float | None) -> float:
    """Relative gain of a child over its parent (0 when it is not better, incorrect or failed)."""
    if status != "done" or not speedup:
        return 0.0
    base = parent_speedup if parent_speedup and parent_speedup > 0 else 1.0
    return max(0.0, speedup / base - 1.0)
