"""Fill a project store deterministically (snapshot tests, the TUI benchmark), and a fake engine.

`fill_store` writes rows straight into SQLite (fast enough for 100,000 candidates); timestamps, sources
and numbers depend only on the arguments, so snapshots are stable.
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

from engine.contract import CandidateAdded, Fork, Mark, Result, RunState
from engine.daemon.daemon import EngineServer
from engine.store.store import DB_NAME, Store

T0 = 1_790_000_000.0
SEED_SOURCE = """// EVOLVE-BLOCK-START
__global__ void gemm_allgather(float *out, const float *in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 2.0f;
}
// EVOLVE-BLOCK-END
int chunk_bytes = 65536;
"""
OPERATORS = ("knob", "variant", "cross", "llm-diff")


LONG_LINE = (
    'static const char *tuning_note = "chunked all-gather overlapped with the GEMM tiles, one '
    'flag per peer and per chunk, retuned at candidate {}";\n'
)


def child_source(number: int) -> str:
    return SEED_SOURCE.replace("65536", str(65536 * (1 + number % 7))).replace("* 2.0f", f"* 2.0f + {number}.0f * 0.0f")


async def create_store(home: Path) -> None:
    store = Store(home)
    await store.open()
    await store.close()


def fill_store(
    home: Path,
    run_id: str = "demo-20261122-1",
    n: int = 40,
    islands: int = 2,
    seed: int = 7,
    fork: bool = True,
    blobs_for: int = 200,
    state: str = "paused",
    long_line: bool = False,
) -> dict[str, Any]:
    """A run with `n` candidates (+ marks, migrations, events, a node, an LLM call, and a fork)."""
    home = Path(home)
    asyncio.run(create_store(home))
    store_blobs = Store(home).blobs
    rng = random.Random(seed)
    db = sqlite3.connect(home / DB_NAME)
    db.execute("PRAGMA journal_mode=WAL")
    config = {"islands": islands, "max_evals": n, "mutator": "design-space", "seed": 0}
    db.execute(
        "INSERT INTO runs (id, workload, workload_path, state, config_json, created_at, updated_at, "
        "baseline_time_ms, elapsed_s) VALUES (?,?,?,?,?,?,?,?,?)",
        (run_id, "demo", "workloads/demo", state, json.dumps(config), T0, T0 + n, 10.0, float(n)),
    )
    rows, events = [], []
    best = 0.0
    for number in range(n):
        cid = number + 1
        island = number % islands
        parent = None if number < islands else max(1, cid - islands)
        gen = 0 if parent is None else number // islands
        op = "seed" if parent is None else OPERATORS[number % len(OPERATORS)]
        text = (
            (SEED_SOURCE + ("" if number == 0 else f"// island {island}\n")) if parent is None else child_source(number)
        )
        if long_line:  # a line longer than the detail pane whose only change is at its end
            text += LONG_LINE.format(number)
        if number < blobs_for:
            h = store_blobs.put_text(text)
        else:
            h = f"{number:064x}"
        roll = rng.random()
        if number % 11 == 5:
            status, correct, speedup, time_ms, reason = "incorrect", 0, None, None, "rank 1 output differs at [17]"
        elif number % 13 == 7:
            status, correct, speedup, time_ms, reason = "failed", None, None, None, "build: error: expected ';'"
        else:
            speedup = round(0.8 + 0.5 * roll + number * 0.4 / max(n, 1), 3)
            time_ms = round(10.0 / speedup, 3)
            status, correct, reason = "done", 1, None
        fitness = None if speedup is None else round(10000 / (1 + time_ms), 3)
        # the engine's shape: the harness's benchmark result.json under "benchmark"
        metrics = (
            None
            if speedup is None
            else json.dumps(
                {
                    "benchmark": {
                        "mode": "benchmark",
                        "configs": [
                            {
                                "name": "small",
                                "baseline_ms": 5.0,
                                "candidate_ms": round(time_ms * 0.5, 4),
                                "speedup": round(10.0 / time_ms, 4),
                                "comp_ms": 3.0,
                                "comm_ms": 2.0,
                                "bound": 1.667,
                            },
                            {
                                "name": "large",
                                "baseline_ms": 15.0,
                                "candidate_ms": round(time_ms * 1.5, 4),
                                "speedup": round(10.0 / time_ms, 4),
                                "comp_ms": 9.0,
                                "comm_ms": 6.0,
                                "bound": 1.667,
                            },
                        ],
                    },
                    "measurements": [speedup],
                }
            )
        )
        ts = T0 + number
        rows.append(
            (
                cid,
                run_id,
                number,
                island,
                gen,
                parent,
                op,
                "design-space" if op != "llm-diff" else "llm:fake-model",
                h,
                json.dumps({"chunk": 65536 * (1 + number % 7)}),
                f"c{number % 5}",
                status,
                correct,
                speedup,
                time_ms,
                10.0 if speedup else None,
                fitness,
                reason,
                metrics,
                ts,
                ts + 0.5,
            )
        )
        if len(events) < 200_000:
            events.append(
                (
                    run_id,
                    ts,
                    "candidate",
                    json.dumps({"id": cid, "number": number, "island": island, "status": "pending", "operator": op}),
                )
            )
            events.append(
                (
                    run_id,
                    ts + 0.5,
                    "result",
                    json.dumps({"id": cid, "status": status, "speedup": speedup, "time_ms": time_ms}),
                )
            )
        if speedup and speedup > best:
            best = speedup
    db.executemany(
        "INSERT INTO candidates (id, run_id, number, island, generation, parent_id, operator, mutator, "
        "source_hash, descriptor_json, cell, status, correct, speedup, time_ms, baseline_ms, fitness, "
        "reason, metrics_json, created_at, finished_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        rows,
    )
    db.executemany("INSERT INTO events (run_id, ts, kind, data_json) VALUES (?,?,?,?)", events)
    if n > 4:
        db.execute(
            "INSERT INTO marks (run_id, candidate_id, verdict, text, at) VALUES (?,?,?,?,?)",
            (run_id, 3, "accept", "clean overlap", T0 + 100),
        )
        db.execute(
            "INSERT INTO marks (run_id, candidate_id, verdict, text, at) VALUES (?,?,?,?,?)",
            (run_id, 4, "reject", "reads past the buffer", T0 + 101),
        )
        db.execute(
            "INSERT INTO migrations_log (run_id, src_island, dst_island, candidate_id, at_evaluation, at) "
            "VALUES (?,?,?,?,?,?)",
            (run_id, 0, 1, 3, 8, T0 + 8),
        )
        log_hash = store_blobs.put_text("nvcc -O3 candidate.cu\nok\n")
        db.execute(
            "INSERT INTO evaluations (candidate_id, run_id, stage, status, rc, duration_s, node, log_hash, "
            "result_json, created_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (3, run_id, "build", "ok", 0, 1.5, "local", log_hash, None, T0 + 3),
        )
        prompt = store_blobs.put_text("Make the all-gather overlap with the GEMM.")
        answer = store_blobs.put_text("<<<<<<< SEARCH\n65536\n=======\n131072\n>>>>>>> REPLACE")
        db.execute(
            "INSERT INTO llm_calls (run_id, candidate_id, model, purpose, status, input_tokens, output_tokens,"
            " cost_usd, prompt_hash, response_hash, at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (run_id, 3, "fake-model", "mutate", "ok", 1200, 300, 0.0125, prompt, answer, T0 + 3),
        )
    if n > 4:  # the job the node's running_jobs counts: the nodes screen lists it
        db.execute(
            "INSERT INTO jobs (id, run_id, candidate_id, stage, state, node, attempts, created_at, updated_at) "
            "VALUES (?,?,?,?,?,?,?,?,?)",
            (f"{run_id}-{n}-benchmark", run_id, n, "benchmark", "running", "local", 1, T0 + n, T0 + n),
        )
    db.execute(
        "INSERT OR REPLACE INTO nodes (name, state_json, updated_at) VALUES (?,?,?)",
        (
            "local",
            json.dumps(
                {
                    "name": "local",
                    "healthy": True,
                    "quarantined": False,
                    "gpus_total": 0,
                    "gpus_busy": 0,
                    "cpu_slots": 2,
                    "cpu_busy": 1,
                    "running_jobs": 1,
                    "failures": 0,
                    "detail": "",
                }
            ),
            T0,
        ),
    )
    if fork:
        db.execute(
            "INSERT INTO runs (id, workload, workload_path, state, parent_run, fork_candidate, config_json, "
            "created_at, updated_at, elapsed_s) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                run_id + "-fork",
                "demo",
                "workloads/demo",
                "paused",
                run_id,
                3,
                json.dumps(config),
                T0 + 200,
                T0 + 200,
                0.0,
            ),
        )
    db.commit()
    db.close()
    return {"run": run_id, "best": best, "n": n}


class FakeEngine:
    """A small engine with the Engine contract, for protocol tests and the benchmark's event source."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        interval: float = 0.05,
        max_candidates: int | None = None,
        children_of_first: bool = False,
    ):
        self.store = store
        self.run_id = run_id
        self.interval = interval
        self.max_candidates = max_candidates
        self.state = "running"
        self.workload = "demo"
        self._stop = asyncio.Event()
        self._running = asyncio.Event()
        self._running.set()
        self.created = 0
        self.children_of_first = children_of_first  # every candidate after the first is its child
        self.first: int | None = None
        self.nodes: list[dict[str, Any]] = []  # what `status` says of the nodes

    @classmethod
    async def open(cls, home: Path, run_id: str, **kw: Any) -> FakeEngine:
        store = await Store(home).open()
        row = await store.fetchone("SELECT id FROM runs WHERE id=?", (run_id,))
        if row is None:
            async with store.transaction() as tx:
                await tx.execute(
                    "INSERT INTO runs (id, workload, workload_path, state, config_json, created_at, "
                    "updated_at) VALUES (?,?,?,?,?,?,?)",
                    (run_id, "demo", "workloads/demo", "running", "{}", time.time(), time.time()),
                )
        return cls(store, run_id, **kw)

    async def _set_state(self, state: str, reason: str = "") -> None:
        self.state = state
        async with self.store.transaction() as tx:
            await tx.execute("UPDATE runs SET state=?, updated_at=? WHERE id=?", (state, time.time(), self.run_id))
            await tx.event(self.run_id, RunState(state=state, reason=reason))

    async def step(self) -> int:
        async with self.store.transaction() as tx:
            row = await tx.fetchone(
                "SELECT COALESCE(MAX(number), -1) + 1 AS n FROM candidates WHERE run_id=?", (self.run_id,)
            )
            number = row["n"]
            h = self.store.blobs.put_text(child_source(number) + f"// {self.run_id}\n")
            parent = self.first if self.children_of_first else None
            cid = await tx.insert(
                "INSERT INTO candidates (run_id, number, island, generation, parent_id, operator, mutator, "
                "source_hash, descriptor_json, cell, status, correct, speedup, time_ms, baseline_ms, fitness, "
                "created_at, finished_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    self.run_id,
                    number,
                    number % 2,
                    number // 2,
                    parent,
                    "knob",
                    "design-space",
                    h,
                    "{}",
                    "c0",
                    "done",
                    1,
                    1.0 + number / 1000,
                    10.0,
                    10.0,
                    900.0,
                    time.time(),
                    time.time(),
                ),
            )
            await tx.event(
                self.run_id,
                CandidateAdded(
                    id=cid,
                    number=number,
                    island=number % 2,
                    generation=number // 2,
                    parent=parent,
                    operator="knob",
                    mutator="design-space",
                    status="done",
                    cell="c0",
                ),
            )
            await tx.event(
                self.run_id,
                Result(
                    id=cid,
                    status="done",
                    correct=True,
                    speedup=1.0 + number / 1000,
                    time_ms=10.0,
                    reason=None,
                    fitness=900.0,
                ),
            )
        self.created += 1
        if self.first is None:
            self.first = cid
        return cid

    async def run(self) -> str:
        await self._set_state("running")
        loop = asyncio.get_running_loop()
        due = loop.time()
        while not self._stop.is_set():
            if not self._running.is_set():
                await self._running.wait()
                due = loop.time()  # a pause does not bank steps to burst out afterwards
            if self._stop.is_set():
                break
            if self.max_candidates is None or self.created < self.max_candidates:
                await self.step()
            # Paced on a schedule, not a sleep after each step: the rate holds whatever a step costs
            # (a short lag is caught up; a long one is forgiven rather than burst out).
            due = max(due + self.interval, loop.time() - 1.0)
            try:
                await asyncio.wait_for(self._stop.wait(), due - loop.time())
            except TimeoutError:
                pass
        await self._set_state("stopped", "stop requested")
        await self.store.close()
        return "stopped"

    async def pause(self, hard: bool = False) -> None:
        self._running.clear()
        await self._set_state("paused", "hard pause" if hard else "pause")

    async def resume(self) -> None:
        self._running.set()
        await self._set_state("running", "resume")

    async def stop(self) -> None:
        self._stop.set()
        self._running.set()

    async def _mark(self, cid: int, verdict: str, text: str) -> None:
        async with self.store.transaction() as tx:
            row = await tx.fetchone("SELECT id FROM candidates WHERE id=? AND run_id=?", (cid, self.run_id))
            if row is None:
                raise ValueError(f"candidate {cid} is not in run {self.run_id}")
            await tx.execute(
                "INSERT INTO marks (run_id, candidate_id, verdict, text, at) VALUES (?,?,?,?,?)",
                (self.run_id, cid, verdict, text, time.time()),
            )
            await tx.event(self.run_id, Mark(id=cid, verdict=verdict, text=text))

    async def accept(self, candidate_id: int, note: str = "") -> None:
        await self._mark(candidate_id, "accept", note)

    async def reject(self, candidate_id: int, reason: str) -> None:
        if not reason.strip():
            raise ValueError("reject needs a reason")
        await self._mark(candidate_id, "reject", reason)

    async def fork(
        self, from_candidate: int | None = None, name: str | None = None, overrides: dict | None = None
    ) -> str:
        new_run = f"{self.run_id}-{name or 'fork'}"
        async with self.store.transaction() as tx:
            await tx.execute(
                "INSERT INTO runs (id, workload, workload_path, state, parent_run, fork_candidate, "
                "config_json, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    new_run,
                    "demo",
                    "workloads/demo",
                    "paused",
                    self.run_id,
                    from_candidate,
                    json.dumps(overrides or {}),
                    time.time(),
                    time.time(),
                ),
            )
            await tx.event(self.run_id, Fork(new_run=new_run, from_candidate=from_candidate))
        return new_run

    def status(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "workload": self.workload,
            "state": self.state,
            "evaluated": self.created,
            "correct": self.created,
            "failed": 0,
            "best": None,
            "llm_cost_usd": 0.0,
            "nodes": self.nodes,
            "elapsed_s": 0.0,
        }


async def serve(home: Path, run: str, **kw):
    """A FakeEngine behind the real EngineServer, running: (engine, server, run info, the engine's task)."""
    engine = await FakeEngine.open(home, run, **kw)
    server = EngineServer(engine, home, run)
    engine.store.on_event = server.on_event
    info = await server.start()
    task = asyncio.create_task(engine.run())
    return engine, server, info, task


async def shutdown(engine, server, task) -> None:
    await engine.stop()
    await asyncio.wait_for(task, 10)
    await server.close()
