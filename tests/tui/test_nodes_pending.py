"""The nodes screen shows why a scheduler's jobs wait: each pending reason with its count and meaning,
and each running job's queue state, read from the store as the engine wrote the Slurm executor's nodes."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time

from storefill import fill_store

from cuco_tui.app import CucoApp

RUN = "demo-20261122-1"


async def test_nodes_screen_shows_slurm_pending_reasons(tmp_path):
    await asyncio.to_thread(fill_store, tmp_path, run_id=RUN, n=6)  # it runs its own event loop
    job = f"{RUN}-c5-benchmark"
    db = sqlite3.connect(tmp_path / "cuco.db")
    db.execute(
        "INSERT OR REPLACE INTO jobs (id, run_id, candidate_id, stage, state, created_at, updated_at) "
        "VALUES (?,?,?,?,?,?,?)",
        (job, RUN, 5, "benchmark", "running", time.time(), time.time()),
    )
    db.execute(
        "INSERT OR REPLACE INTO nodes (name, state_json, updated_at) VALUES (?,?,?)",
        (
            "slurm:gpu",
            json.dumps(
                {
                    "name": "slurm:gpu",
                    "healthy": True,
                    "running_jobs": 1,
                    "detail": "1 running, 4 pending",
                    "pending": {"Resources": 3, "Priority": 1},
                    "queue": {job: "PENDING: Resources"},
                }
            ),
            time.time(),
        ),
    )
    db.commit()
    db.close()
    app = CucoApp(tmp_path, RUN)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause(0.5)
        await pilot.press("n")
        for _ in range(50):
            await pilot.pause(0.1)
            pending = app.screen.query_one("#pending-reasons")
            if pending.display and "Resources" in str(pending.render()):
                break
        text = str(pending.render())
        assert "slurm:gpu: 3 pending for Resources: waiting for the GPUs/CPUs/memory it asks for to free up" in text
        assert "1 pending for Priority" in text
        jobs = app.screen.query_one("#jobs-table")
        rows = [[str(c) for c in jobs.get_row_at(i)] for i in range(jobs.row_count)]
        row = next(r for r in rows if r[0] == job)
        assert "PENDING: Resources" in row[2], row
