"""The engine's decisions on the synthetic executor (deterministic results): every candidate's parent,
operator, cell, status, fitness and island, the archive and the best, a rejection of the best and its
acceptance, and the run's event kinds in order, as one JSON document on stdout. Two trees that decide
alike print the same bytes:

    (cd TREE_A && PYTHONPATH=. python /path/to/engine_decisions.py 60) > a.json
    (cd TREE_B && PYTHONPATH=. python /path/to/engine_decisions.py 60) > b.json && cmp a.json b.json

docs/measurements/engine.md ("The engine split into loop, population and ledger") has a run.
"""

import asyncio
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path.cwd() / "tests" / "engine"))
from synthetic import SyntheticExecutor  # noqa: E402

from engine.config import RunConfig  # noqa: E402
from engine.run.engine import Engine  # noqa: E402
from engine.workload import load_workload  # noqa: E402


async def main(evals: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        w = load_workload("workloads/demo")
        out = []
        for islands in (1, 3):
            ex = SyntheticExecutor(slots=1, fail_every=7)
            cfg = RunConfig(max_evals=evals, concurrency=1, islands=islands, seed=7, migration_interval=10)
            e = await Engine.create(Path(tmp) / f"h{islands}", w, cfg, run_id="r1", executor=ex)
            try:
                await e.run()
                best = e.best.id
                await e.reject(best, "bench")
                after_reject = (
                    e.best.id if e.best else None,
                    sorted((k, v.candidate_id) for k, v in e.archive.cells.items()),
                )
                await e.accept(best, "back")
                rows = await e.store.fetchall(
                    "SELECT id, parent_id, operator, cell, status, fitness, island FROM candidates ORDER BY id"
                )
                events = await e.store.fetchall("SELECT kind FROM events WHERE run_id='r1' ORDER BY seq")
                out.append(
                    {
                        "rows": rows,
                        "best": best,
                        "after_reject": after_reject,
                        "best_after_accept": e.best.id,
                        "archive": sorted((k, v.candidate_id) for k, v in e.archive.cells.items()),
                        "events": [r["kind"] for r in events],
                    }
                )
            finally:
                await e.close()
        print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 60))
