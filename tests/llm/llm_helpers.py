"""Shared helpers of the LLM tests: a store with a run, candidate views, answers for the demo workload."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from engine.candidate_view import CandidateView
from engine.search.mutators.base import ProposalContext
from engine.store.store import Store
from engine.workload import load_workload

SECRET = "sk-ant-SECRET-0123456789abcdef"
OPENAI_SECRET = "sk-proj-OPENAISECRET-0123456789"


def demo_workload():
    return load_workload("demo")


async def open_store(home: Path, run_id: str = "run1") -> Store:
    store = await Store(home).open()
    async with store.transaction() as tx:
        await tx.execute(
            "INSERT INTO runs (id, workload, workload_path, state, config_json, created_at, updated_at) "
            "VALUES (?,?,?,?,?,?,?)",
            (run_id, "demo", "workloads/demo", "running", "{}", time.time(), time.time()),
        )
    return store


async def add_candidate(
    store: Store,
    run_id: str,
    number: int,
    source: str,
    *,
    status: str = "done",
    speedup: float | None = 1.0,
    mutator: str = "design-space",
    parent_id: int | None = None,
    operator: str = "seed",
    reason: str | None = None,
) -> int:
    h = store.blobs.put_text(source)
    async with store.transaction() as tx:
        return await tx.insert(
            "INSERT INTO candidates (run_id, number, island, generation, parent_id, operator, mutator, source_hash, "
            "descriptor_json, cell, status, speedup, reason, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                run_id,
                number,
                0,
                number,
                parent_id,
                operator,
                mutator,
                h + str(number),
                json.dumps({"placement": "sequential"}),
                "placement=sequential",
                status,
                speedup,
                reason,
                time.time(),
            ),
        )


def view(source: str, cid: int = 1, **kw) -> CandidateView:
    base = dict(
        id=cid,
        source=source,
        descriptor={"placement": "sequential", "sync": "barrier"},
        status="done",
        island=0,
        generation=0,
        operator="seed",
        speedup=1.0,
        time_ms=2.0,
    )
    base.update(kw)
    return CandidateView(**base)


def context(
    store: Store,
    workload,
    parent: CandidateView,
    *,
    run_id: str = "run1",
    phase: str = "exploit",
    seed: int = 0,
    second: CandidateView | None = None,
    island_sources=None,
    rejected=(),
    feedback_attempts: int = 3,
    inspirations=(),
) -> ProposalContext:
    return ProposalContext(
        run_id=run_id,
        workload=workload,
        parent=parent,
        inspirations=list(inspirations),
        second_parent=second,
        rejected=list(rejected),
        island_sources=list(island_sources if island_sources is not None else [parent.source]),
        phase=phase,
        rng=random.Random(seed),
        evaluation_number=1,
        store=store,
        feedback_attempts=feedback_attempts,
    )


def knob_diff(old: str = "32", new: str = "16") -> str:
    return (
        "Smaller chunks let the copy start earlier.\n\n"
        "<<<<<<< SEARCH\n"
        f"static const int kChunkRows = {old};  // cuco:knob chunk_rows\n"
        "=======\n"
        f"static const int kChunkRows = {new};  // cuco:knob chunk_rows\n"
        ">>>>>>> REPLACE\n"
    )


def outside_diff() -> str:
    return (
        "<<<<<<< SEARCH\n"
        'extern "C" int cuco_setup(const cuco_problem*) { return 0; }\n'
        "=======\n"
        'extern "C" int cuco_setup(const cuco_problem*) { return 1; }\n'
        ">>>>>>> REPLACE\n"
    )


def preproc_diff() -> str:
    return (
        "<<<<<<< SEARCH\n"
        "static const int kStagger = 0;  // cuco:knob stagger\n"
        "=======\n"
        "#define kStagger 1\n"
        ">>>>>>> REPLACE\n"
    )
