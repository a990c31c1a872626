"""Control operations on the store: accept, reject, fork, run state.

The live engine calls these (then updates its in-memory view); with no live engine the CLI calls them
directly, briefly becoming the store's writer.
"""

from __future__ import annotations

import time

from remote.errors import InputError

from ..config import RunConfig
from ..contract import ArchiveCell, Fork, Mark, RunState, StrategyMark
from ..llm import strategies as strat
from ..store.counting import ACCEPTED, COUNTS_SQL, NEEDS_REVIEW, REJECTED
from ..store.runids import new_run_id
from ..store.schema import DONE, RUN_STATES
from ..store.store import Store, Tx
from ..workload import Workload

STRATEGY_PREFIX = "strategy."  # fork overrides that edit the strategy population
STRATEGY_EDITS = ("add", "pin", "unpin", "retire")


async def _candidate_in_run(tx: Tx, run_id: str, candidate_id: int) -> dict:
    row = await tx.fetchone("SELECT * FROM candidates WHERE id=? AND run_id=?", (candidate_id, run_id))
    if row is None:
        raise InputError("CANDIDATE", str(candidate_id), f"no candidate {candidate_id} in run {run_id}")
    return row


async def latest_verdict(tx: Tx, candidate_id: int) -> str | None:
    row = await tx.fetchone("SELECT verdict FROM marks WHERE candidate_id=? ORDER BY id DESC LIMIT 1", (candidate_id,))
    return row["verdict"] if row and row["verdict"] != "clear" else None


async def recompute_cell(tx: Tx, run_id: str, cell: str) -> None:
    """The cell's elite is its best correct candidate that no one rejected."""
    best = await tx.fetchone(
        f"SELECT c.id, c.fitness FROM candidates c WHERE c.run_id=? AND c.cell=? AND {COUNTS_SQL} "
        "ORDER BY c.fitness DESC, c.id LIMIT 1",
        (run_id, cell),
    )
    if best is None:
        await tx.execute("DELETE FROM archive WHERE run_id=? AND cell=?", (run_id, cell))
    else:
        await tx.execute(
            "INSERT OR REPLACE INTO archive (run_id, cell, candidate_id, fitness) VALUES (?,?,?,?)",
            (run_id, cell, best["id"], best["fitness"]),
        )
    await tx.event(
        run_id, ArchiveCell(cell=cell, id=best["id"] if best else None, fitness=best["fitness"] if best else None)
    )


async def accept(store: Store, run_id: str, candidate_id: int, note: str = "") -> None:
    async with store.transaction() as tx:
        row = await _candidate_in_run(tx, run_id, candidate_id)
        await tx.insert(
            "INSERT INTO marks (run_id, candidate_id, verdict, text, at) VALUES (?,?,?,?,?)",
            (run_id, candidate_id, "accept", note, time.time()),
        )
        await _decide_review(tx, candidate_id, ACCEPTED)
        await tx.event(run_id, Mark(id=candidate_id, verdict="accept", text=note))
        await recompute_cell(tx, run_id, row["cell"])  # an accepted result joins the search


async def _decide_review(tx: Tx, candidate_id: int, state: str) -> None:
    """A person's verdict closes the candidate's review, if it was waiting for one."""
    await tx.execute("UPDATE candidates SET review=? WHERE id=? AND review IS NOT NULL", (state, candidate_id))


async def reject(store: Store, run_id: str, candidate_id: int, reason: str) -> None:
    if not reason or not reason.strip():
        raise InputError("--reason", "reason", "a rejection needs a reason (it is shown to people and to the LLM)")
    async with store.transaction() as tx:
        row = await _candidate_in_run(tx, run_id, candidate_id)
        await tx.insert(
            "INSERT INTO marks (run_id, candidate_id, verdict, text, at) VALUES (?,?,?,?,?)",
            (run_id, candidate_id, "reject", reason.strip(), time.time()),
        )
        await _decide_review(tx, candidate_id, REJECTED)
        await tx.event(run_id, Mark(id=candidate_id, verdict="reject", text=reason.strip()))
        await recompute_cell(tx, run_id, row["cell"])


async def create_run(store: Store, run_id: str, workload: Workload, config: RunConfig) -> None:
    """A new run's row and its first state; an InputError when the name is taken."""
    now = time.time()
    async with store.transaction() as tx:
        if await tx.fetchone("SELECT id FROM runs WHERE id=?", (run_id,)):
            raise InputError("--name", "name", f"a run named {run_id!r} already exists (see `cuco ls`)")
        await tx.execute(
            "INSERT INTO runs (id, workload, workload_path, state, config_json, created_at, updated_at) "
            "VALUES (?,?,?,?,?,?,?)",
            (run_id, workload.name, str(workload.root), "running", config.to_json(), now, now),
        )
        await tx.event(run_id, RunState(state="running", reason="created"))


async def set_state(store: Store, run_id: str, state: str, reason: str = "") -> None:
    if state not in RUN_STATES:
        raise ValueError(f"unknown run state {state!r}")
    now = time.time()
    async with store.transaction() as tx:
        finished = now if state in ("finished", "failed", "stopped") else None
        await tx.execute(
            "UPDATE runs SET state=?, stop_reason=?, updated_at=?, finished_at=? WHERE id=?",
            (state, reason or None, now, finished, run_id),
        )
        await tx.event(run_id, RunState(state=state, reason=reason))


async def fork(
    store: Store, run_id: str, from_candidate: int | None = None, name: str | None = None, overrides: dict | None = None
) -> str:
    """A new run whose generation 0 is the chosen candidate (default: the parent's best) plus the parent
    run's archive. It is created paused; starting it is the caller's choice."""
    parent = await store.fetchone("SELECT * FROM runs WHERE id=?", (run_id,))
    if parent is None:
        raise InputError("RUN", run_id, "no such run (see `cuco ls`)")
    overrides = dict(overrides or {})
    edits = {k: overrides.pop(k) for k in list(overrides) if k.startswith(STRATEGY_PREFIX)}
    config = RunConfig.from_json(parent["config_json"]).with_overrides(overrides)
    new_id = new_run_id(store.home, parent["workload"], name)
    now = time.time()
    async with store.transaction() as tx:
        if from_candidate is None:
            best = await tx.fetchone(
                f"SELECT c.id FROM candidates c WHERE c.run_id=? AND {COUNTS_SQL} "
                "ORDER BY c.fitness DESC, c.id LIMIT 1",
                (run_id,),
            )
            if best is None:
                raise InputError("RUN", run_id, "has no correct candidate to fork from yet; pass --from CANDIDATE")
            from_candidate = best["id"]
        chosen = await _candidate_in_run(tx, run_id, from_candidate)
        await tx.execute(
            "INSERT INTO runs (id, workload, workload_path, state, parent_run, fork_candidate, config_json, "
            "created_at, updated_at, baseline_time_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                new_id,
                parent["workload"],
                parent["workload_path"],
                "paused",
                run_id,
                from_candidate,
                config.to_json(),
                now,
                now,
                parent["baseline_time_ms"],
            ),
        )
        elites = await tx.fetchall("SELECT candidate_id FROM archive WHERE run_id=? ORDER BY fitness DESC", (run_id,))
        members = [from_candidate] + [e[0] for e in elites if e[0] != from_candidate]
        for number, cid in enumerate(members):
            src = chosen if cid == from_candidate else await tx.fetchone("SELECT * FROM candidates WHERE id=?", (cid,))
            assert src is not None, f"archive names candidate {cid}, which is not in the store"  # a foreign key
            if await latest_verdict(tx, cid) == "reject":
                continue
            (new_cid,) = await tx.reserve_candidate_ids(1)
            await tx.execute(
                "INSERT INTO candidates (id, run_id, number, island, generation, parent_id, operator, mutator, "
                "source_hash, descriptor_json, cell, status, correct, speedup, time_ms, baseline_ms, fitness, "
                "reason, metrics_json, origin_id, created_at, finished_at, review) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    new_cid,
                    new_id,
                    number,
                    number % max(1, config.islands),
                    0,
                    None,
                    "fork",
                    "fork",
                    src["source_hash"],
                    src["descriptor_json"],
                    src["cell"],
                    src["status"],
                    src["correct"],
                    src["speedup"],
                    src["time_ms"],
                    src["baseline_ms"],
                    src["fitness"],
                    src["reason"],
                    src["metrics_json"],
                    cid,
                    now,
                    now,
                    src["review"],
                ),
            )
            if src["status"] == DONE and src["fitness"] is not None and src["review"] != NEEDS_REVIEW:
                await tx.execute(
                    "INSERT INTO archive (run_id, cell, candidate_id, fitness) VALUES (?,?,?,?) "
                    "ON CONFLICT(run_id, cell) DO UPDATE SET candidate_id=excluded.candidate_id, "
                    "fitness=excluded.fitness WHERE excluded.fitness > archive.fitness",
                    (new_id, src["cell"], new_cid, src["fitness"]),
                )
        await _inherit_strategies(tx, run_id, new_id, edits)
        await tx.event(run_id, Fork(new_run=new_id, from_candidate=from_candidate))
        await tx.event(new_id, RunState(state="paused", reason=f"forked from {run_id} at candidate {from_candidate}"))
    return new_id


async def _population(tx: Tx, run_id: str) -> strat.Population | None:
    row = await tx.fetchone("SELECT value_json FROM run_state WHERE run_id=? AND key=?", (run_id, strat.STATE_KEY))
    marks = [
        dict(zip(("id", "verdict", "strategy", "text"), r))
        for r in await tx.fetchall(
            "SELECT id, verdict, strategy, text FROM strategy_marks WHERE run_id=? ORDER BY id", (run_id,)
        )
    ]
    return strat.effective(row["value_json"] if row else None, marks)


async def _mark_strategy(
    tx: Tx, run_id: str, verdict: str, strategy: str | None, text: str, field: str = "strategy"
) -> None:
    if verdict not in strat.MARK_VERDICTS:
        raise InputError(field, verdict, f"unknown strategy mark; use one of {', '.join(strat.MARK_VERDICTS)}")
    text = strat.clean(text or "")
    if verdict == "add":
        if not text:
            raise InputError(field, "add", "a new strategy needs its text")
        strategy = None
    else:
        pop = await _population(tx, run_id)
        if pop is None or pop.get(strategy or "") is None:
            known = ", ".join(s.id for s in pop.strategies) if pop else "none yet"
            raise InputError(field, str(strategy), f"no strategy {strategy!r} in run {run_id} (known: {known})")
    mid = await tx.insert(
        "INSERT INTO strategy_marks (run_id, strategy, verdict, text, at) VALUES (?,?,?,?,?)",
        (run_id, strategy, verdict, text, time.time()),
    )
    await tx.event(run_id, StrategyMark(strategy=strategy, verdict=verdict, text=text, mark=mid))


async def mark_strategy(store: Store, run_id: str, verdict: str, strategy: str | None = None, text: str = "") -> None:
    """An operator mark on a run's strategy population (pin, unpin, retire, add): recorded like accept and
    reject, and folded into the population by the LLM mutator before its next proposal."""
    async with store.transaction() as tx:
        if await tx.fetchone("SELECT id FROM runs WHERE id=?", (run_id,)) is None:
            raise InputError("RUN", run_id, "no such run (see `cuco ls`)")
        await _mark_strategy(tx, run_id, verdict, strategy, text)


async def _inherit_strategies(tx: Tx, run_id: str, new_id: str, edits: dict) -> None:
    """A fork starts from its parent's strategies (what they earned included); `--set strategy.add=TEXT`,
    `strategy.pin=s2`, `strategy.unpin=s2`, `strategy.retire=s3,s4` edit them, recorded as marks."""
    pop = await _population(tx, run_id)
    if pop is not None:
        await strat.save(tx, new_id, pop.inherited())
    for key, value in edits.items():
        verdict = key[len(STRATEGY_PREFIX) :]
        if verdict not in STRATEGY_EDITS:
            raise InputError("--set", key, f"unknown strategy edit; use strategy.{', strategy.'.join(STRATEGY_EDITS)}")
        values = value if isinstance(value, list) else [value]
        for v in values:
            if verdict == "add":
                await _mark_strategy(tx, new_id, "add", None, str(v), field="--set")
            else:
                for sid in (x.strip() for x in str(v).split(",") if x.strip()):
                    await _mark_strategy(tx, new_id, verdict, sid, "set when forking", field="--set")


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise InputError("--set", item, "must look like KEY=VALUE (e.g. islands=4)")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out
