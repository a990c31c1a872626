"""A run's population of mutation strategies: short texts (what to try and why), one carried by each
mutation prompt, chosen by a UCB1 bandit on the improvement of the children they produced.

A strategy is credited once per child, when the child's evaluation is final: the reward is the child's
relative speedup gain over its parent (0 for a child that is not faster, incorrect, failed or refused),
scored like the model bandit (mean reward normalised by the best strategy's, plus an exploration term).
The meta step retires strategies whose last `retire_after` children all failed and asks a model to
rewrite the weakest ones from what worked and what failed.

The operator steers with marks (`strategy_marks` rows: pin, unpin, retire, add), which the population
folds in order; pinned strategies are the only ones the bandit picks while any is pinned, and the meta
step never retires or rewrites them. The state is plain JSON in `run_state` (key `strategies`), so a
resumed run keeps it and a fork copies it.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .bandit import reward_of
from .keys import redact
from .prompts import trim

if TYPE_CHECKING:
    from ..store.store import Store, Tx
    from ..workload import Workload

STATE_KEY = "strategies"
ACTIVE, RETIRED, REWRITTEN = "active", "retired", "rewritten"
MARK_VERDICTS = ("pin", "unpin", "retire", "add")
MAX_TEXT = 300  # characters of one strategy
MAX_SEEDS = 6
MAX_REASONS = 3  # failure reasons kept per strategy, for the rewrite prompt
MAX_PENDING = 256  # proposals awaiting their child (one the engine dropped as a duplicate never comes)
FINAL = ("done", "incorrect", "failed", "refused")


@dataclass
class Strategy:
    id: str
    text: str
    origin: str = "seed"  # seed | config | operator | meta (rewrote <id>) | fork
    status: str = ACTIVE  # active | retired | rewritten
    pinned: bool = False
    pulls: int = 0  # prompts that carried it
    children: int = 0  # children credited (final evaluations)
    successes: int = 0  # children correct and faster than their parent
    failures: int = 0  # children incorrect, failed or refused
    streak: int = 0  # failures in a row (the last children)
    reward: float = 0.0  # sum of relative gains
    reasons: list[str] = field(default_factory=list)  # the latest failure reasons (public, scrubbed)
    why: str = ""  # why it left the population

    @property
    def active(self) -> bool:
        return self.status == ACTIVE

    @property
    def mean_gain(self) -> float | None:
        return self.reward / self.children if self.children else None


@dataclass
class Population:
    strategies: list[Strategy] = field(default_factory=list)
    exploration: float = 0.5
    next_id: int = 1
    pending: dict[int, str] = field(default_factory=dict)  # llm call id (of a child's proposal) -> strategy id
    credited: set[int] = field(default_factory=set)  # candidate ids already counted
    marks_seen: int = 0  # the last operator mark folded in
    meta_at: int = 0  # finished evaluations at the last meta step

    # ----- membership -----------------------------------------------------------------------------

    def get(self, sid: str) -> Strategy | None:
        return next((s for s in self.strategies if s.id == sid), None)

    def active(self) -> list[Strategy]:
        return [s for s in self.strategies if s.active]

    def add(self, text: str, origin: str) -> Strategy:
        s = Strategy(f"s{self.next_id}", clean(text), origin)
        self.next_id += 1
        self.strategies.append(s)
        return s

    def retire(self, s: Strategy, why: str, status: str = RETIRED) -> None:
        s.status, s.pinned, s.why = status, False, why

    # ----- the bandit -----------------------------------------------------------------------------

    def candidates(self) -> list[Strategy]:
        active = self.active()
        pinned = [s for s in active if s.pinned]
        return pinned or active

    def scores(self) -> dict[str, float]:
        arms = self.candidates()
        total = sum(s.pulls for s in arms) or 1
        values = {s.id: (s.reward / s.children if s.children else 0.0) for s in arms}
        best = max(values.values(), default=0.0) or 1.0
        out = {}
        for s in arms:
            if s.pulls == 0:
                out[s.id] = math.inf
            else:
                out[s.id] = values[s.id] / best + self.exploration * math.sqrt(2 * math.log(total) / s.pulls)
        return out

    def select(self, rng: random.Random, point: dict[str, str] | None = None) -> Strategy | None:
        """The bandit's pick among the strategies that apply to a parent at `point` (all of them when none
        does)."""
        scores = self.scores()
        if not scores:
            return None
        if point:
            fit = {sid: v for sid, v in scores.items() if applies(self.get(sid).text, point)}  # type: ignore[union-attr]
            scores = fit or scores
        top = max(scores.values())
        return self.get(rng.choice([sid for sid, v in scores.items() if v == top]))

    def pulled(self, s: Strategy) -> None:
        s.pulls += 1

    def proposed(self, call_id: int, s: Strategy) -> None:
        """The child of this call (once the engine links the call to it) is credited to `s`."""
        self.pending[int(call_id)] = s.id
        for stale in sorted(self.pending)[:-MAX_PENDING]:
            del self.pending[stale]

    def credit(self, candidate_id: int, sid: str, status: str, reward: float, reason: str = "") -> bool:
        if candidate_id in self.credited:
            return False
        self.credited.add(candidate_id)
        s = self.get(sid)
        if s is None:
            return False
        s.children += 1
        s.reward += max(0.0, reward)
        if status == "done" and reward > 0:
            s.successes += 1
        if status == "done":
            s.streak = 0
        else:
            s.failures += 1
            s.streak += 1
            if reason:
                s.reasons = (s.reasons + [reason])[-MAX_REASONS:]
        return True

    async def sync(self, store: Store, run_id: str, public_reason=lambda text: text) -> int:
        """Credit the finished children of pending proposals; returns how many were credited."""
        if not self.pending:
            return 0
        ids = sorted(self.pending)
        rows = await store.fetchall(
            f"SELECT l.id AS call_id, c.id, c.status, c.speedup, c.reason, p.speedup AS parent_speedup "
            f"FROM llm_calls l JOIN candidates c ON c.id = l.candidate_id LEFT JOIN candidates p ON p.id = c.parent_id "
            f"WHERE l.id IN ({','.join('?' * len(ids))}) AND c.run_id=? "
            f"AND c.status IN ({','.join('?' * len(FINAL))})",
            (*ids, run_id, *FINAL),
        )
        n = 0
        for r in rows:
            sid = self.pending.pop(int(r["call_id"]), None)
            if sid is None:
                continue
            reason = public_reason(trim(" ".join((r["reason"] or "").split()), 200)) if r["status"] != "done" else ""
            n += self.credit(
                int(r["id"]), sid, r["status"], reward_of(r["status"], r["speedup"], r["parent_speedup"]), reason
            )
        return n

    # ----- the meta step's rules ------------------------------------------------------------------

    def failing(self, retire_after: int) -> list[Strategy]:
        """Active, unpinned strategies whose last `retire_after` children all failed."""
        if retire_after <= 0:
            return []
        return [s for s in self.active() if not s.pinned and s.streak >= retire_after]

    def weakest(self, count: int, min_children: int) -> list[Strategy]:
        """Up to `count` active, unpinned strategies with enough children and the lowest mean gain, each
        below the best's (a population that all does equally well has nothing to rewrite)."""
        rated = [s for s in self.active() if s.children >= min_children]
        judged = [s for s in self.active() if s.children]
        if count <= 0 or not rated or len(judged) < 2:
            return []
        best = max(s.reward / s.children for s in judged)
        weak = sorted(
            (s for s in rated if not s.pinned and s.reward / s.children < best),
            key=lambda s: (s.reward / s.children, -s.children),
        )
        return weak[:count]

    # ----- operator marks -------------------------------------------------------------------------

    def fold(self, marks: Iterable[dict[str, Any]]) -> int:
        """Apply operator marks (rows of `strategy_marks`, in id order) not folded yet; returns how many."""
        n = 0
        for m in marks:
            if int(m["id"]) <= self.marks_seen:
                continue
            self.marks_seen = int(m["id"])
            apply_mark(self, m["verdict"], m["strategy"], m["text"])
            n += 1
        return n

    # ----- persistence ----------------------------------------------------------------------------

    def to_json(self) -> str:
        return json.dumps(
            {
                "strategies": [asdict(s) for s in self.strategies],
                "exploration": self.exploration,
                "next_id": self.next_id,
                "pending": {str(k): v for k, v in self.pending.items()},
                "credited": sorted(self.credited),
                "marks_seen": self.marks_seen,
                "meta_at": self.meta_at,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> Population:
        data: dict[str, Any] = json.loads(text)
        known = set(Strategy.__dataclass_fields__)
        return cls(
            strategies=[Strategy(**{k: v for k, v in s.items() if k in known}) for s in data.get("strategies", [])],
            exploration=float(data.get("exploration", 0.5)),
            next_id=int(data.get("next_id", 1)),
            pending={int(k): str(v) for k, v in (data.get("pending") or {}).items()},
            credited={int(c) for c in data.get("credited", [])},
            marks_seen=int(data.get("marks_seen", 0)),
            meta_at=int(data.get("meta_at", 0)),
        )

    def inherited(self) -> Population:
        """The population a fork starts with: the same strategies and what they earned, nothing pending."""
        copy = Population.from_json(self.to_json())
        copy.pending, copy.credited, copy.marks_seen, copy.meta_at = {}, set(), 0, 0
        return copy

    def rows(self) -> list[dict[str, Any]]:
        """One plain row per strategy (report, panel): active first, best mean gain first."""
        total = sum(s.pulls for s in self.strategies) or 1
        order = sorted(
            self.strategies,
            key=lambda s: (
                not s.active,
                not s.pinned,
                -(s.mean_gain or 0.0),
                int(s.id[1:]) if s.id[1:].isdigit() else 0,
            ),
        )
        return [
            {
                "id": s.id,
                "text": s.text,
                "status": s.status,
                "pinned": s.pinned,
                "origin": s.origin,
                "pulls": s.pulls,
                "share": round(s.pulls / total, 3),
                "children": s.children,
                "successes": s.successes,
                "failures": s.failures,
                "mean_gain": None if s.mean_gain is None else round(s.mean_gain, 4),
                "why": s.why,
            }
            for s in order
        ]


def clean(text: str) -> str:
    """One line, bounded (a longer text is cut with a marker), nothing shaped like a key."""
    text = redact(" ".join(str(text).split()))
    if len(text) <= MAX_TEXT:
        return text
    marker = f" [... cut at {MAX_TEXT} characters]"
    return text[: MAX_TEXT - len(marker)].rsplit(" ", 1)[0] + marker


NAMED_POINT = re.compile(r"\b([a-z_][a-z0-9_]*)=([A-Za-z0-9_.]+)")


def applies(text: str, point: dict[str, str]) -> bool:
    """False for a strategy that asks for a design point the parent is already at (every `k=v` it names
    that is a dimension of the point equals the parent's value)."""
    wanted = {k: v for k, v in NAMED_POINT.findall(text) if k in point}
    return not wanted or any(point[k] != v for k, v in wanted.items())


def apply_mark(pop: Population, verdict: str, sid: str | None, text: str) -> None:
    if verdict == "add":
        pop.add(text, "operator")
        return
    s = pop.get(sid or "")
    if s is None:
        return
    if verdict == "pin":
        s.status, s.pinned, s.why = ACTIVE, True, ""
    elif verdict == "unpin":
        s.pinned = False
    elif verdict == "retire":
        pop.retire(s, f"retired by the operator{': ' + text if text else ''}")


def seed_texts(workload: Workload) -> list[str]:
    """Starting strategies from the workload's design space (structural dimensions, known
    implementations, knobs) and its task."""
    space = workload.design_space
    texts = []
    for d in space.structural:
        others = [v for v in d.values if v != d.default]
        if others:
            texts.append(
                f"Change the {d.name} of the design (the seed uses {d.default}; try {' or '.join(others)}) "
                f"and say why it should pay off on these sizes."
            )
    for v in space.variants:
        point = " ".join(f"{k}={x}" for k, x in v.point.items())
        texts.append(f"Move the parent toward the {v.name} implementation ({point}) in one step.")
    knobs = [d for d in space.dimensions.values() if d.knob]
    if knobs:
        texts.append(
            "Tune "
            + ", ".join(f"{d.name} ({', '.join(d.values)})" for d in knobs)
            + ": pick values from where the parent's time goes."
        )
    texts.append("Overlap communication with computation: send finished pieces while computing the next ones.")
    if workload.task:
        texts.append("Remove waiting: replace global synchronisation with finer-grained signals where the task allows.")
    seen, out = set(), []
    for t in texts:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out[:MAX_SEEDS]


def seeded(workload: Workload, texts: list[str] | None = None, exploration: float = 0.5) -> Population:
    pop = Population(exploration=exploration)
    for t in texts or seed_texts(workload):
        pop.add(t, "config" if texts else "seed")
    return pop


async def load(store: Store, run_id: str) -> Population | None:
    row = await store.fetchone("SELECT value_json FROM run_state WHERE run_id=? AND key=?", (run_id, STATE_KEY))
    if row is None:
        return None
    try:
        return Population.from_json(row["value_json"])
    except (ValueError, TypeError, KeyError):
        return None


async def marks_after(store: Store, run_id: str, after: int) -> list[dict[str, Any]]:
    return await store.fetchall(
        "SELECT id, verdict, strategy, text FROM strategy_marks WHERE run_id=? AND id>? ORDER BY id", (run_id, after)
    )


async def save(tx: Tx, run_id: str, pop: Population) -> None:
    await tx.execute(
        "INSERT OR REPLACE INTO run_state (run_id, key, value_json) VALUES (?,?,?)", (run_id, STATE_KEY, pop.to_json())
    )


def effective(state_json: str | None, marks: Iterable[dict[str, Any]]) -> Population | None:
    """The population as the mutator will see it: its stored state with the operator's later marks folded
    in (None when the run has none yet and no mark adds one)."""
    pop = None
    if state_json:
        try:
            pop = Population.from_json(state_json)
        except (ValueError, TypeError, KeyError):
            pop = None
    marks = list(marks)
    if pop is None:
        if not any(m["verdict"] == "add" for m in marks):
            return None
        pop = Population()
    pop.fold(marks)
    return pop
