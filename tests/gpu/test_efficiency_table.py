"""tests/gpu/efficiency_table.py on a store made by the engine's own Store (CPU only, no GPU marker)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sqlite3
from pathlib import Path

import pytest

from engine.store.store import Store

_spec = importlib.util.spec_from_file_location("efficiency_table", Path(__file__).with_name("efficiency_table.py"))
efficiency_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(efficiency_table)


def _config(name, base, cand, comp, comm, correct=True):
    return {
        "name": name,
        "correct": correct,
        "baseline_ms": base,
        "candidate_ms": cand,
        "comp_ms": comp,
        "comm_ms": comm,
    }


def _make_store(home: Path) -> Path:
    async def create():
        s = await Store(home).open()
        await s.close()

    asyncio.run(create())
    db = home / "cuco.db"
    con = sqlite3.connect(db)
    con.execute(
        "insert into runs (id, workload, workload_path, state, config_json, created_at, updated_at) "
        "values ('r', 'gemm_allgather', '/w', 'finished', '{}', 0, 0)"
    )
    # (number, descriptor, verify configs correct?, benchmark results (each a list of configs))
    cands = [
        (
            0,
            {"backend": "host_nccl"},
            True,
            [[_config("big", 2.0, 2.0, 1.5, 0.4), _config("small", 0.1, 0.1, 0.08, 0.02)]],
        ),
        # overlaps well on big (eff (2.0 - 1.6) / (2.0 - 1.5) = 0.8), so-so on small ((0.1 - 0.094) / 0.02 = 0.3)
        (1, {"backend": "a"}, True, [[_config("big", 2.0, 1.6, 1.5, 0.4), _config("small", 0.1, 0.094, 0.08, 0.02)]]),
        # measured twice: means 1.7 on big -> 0.6, 0.09 on small -> 0.5; the better single candidate overall
        (
            2,
            {"backend": "b"},
            True,
            [
                [_config("big", 2.0, 1.65, 1.5, 0.4), _config("small", 0.1, 0.088, 0.08, 0.02)],
                [_config("big", 2.0, 1.75, 1.5, 0.4), _config("small", 0.1, 0.092, 0.08, 0.02)],
            ],
        ),
        # fastest everywhere but failed verification on a hidden config: never the best
        (3, {"backend": "c"}, False, [[_config("big", 2.0, 1.5, 1.5, 0.4), _config("small", 0.1, 0.08, 0.08, 0.02)]]),
    ]
    for number, desc, ok, benches in cands:
        cur = con.execute(
            "insert into candidates (run_id, number, island, generation, operator, mutator, source_hash, "
            "descriptor_json, cell, status, correct, created_at) values ('r', ?, 0, 0, 'variant', 'design-space', ?, ?, "
            "'', 'done', 1, 0)",
            (number, f"h{number}", json.dumps(desc)),
        )
        cid = cur.lastrowid
        verify = {"correct": ok, "configs": [{"name": "big", "correct": True}, {"name": "hidden", "correct": ok}]}
        con.execute(
            "insert into evaluations (candidate_id, run_id, stage, status, result_json, created_at) "
            "values (?, 'r', 'verify', 'ok', ?, 0)",
            (cid, json.dumps(verify)),
        )
        for configs in benches:
            con.execute(
                "insert into evaluations (candidate_id, run_id, stage, status, result_json, created_at) "
                "values (?, 'r', 'benchmark', 'ok', ?, 0)",
                (cid, json.dumps({"configs": configs})),
            )
    con.commit()
    con.close()
    return db


def test_efficiency_is_computed_per_config_from_the_same_jobs(tmp_path):
    run, cands = efficiency_table.load(str(_make_store(tmp_path)))
    by_id = {c["id"]: c for c in cands}
    assert run == "r" and sorted(by_id) == [1, 2, 3, 4]  # store ids, as `cuco report` names them
    assert by_id[2]["configs"]["big"]["eff"] == pytest.approx(0.8)
    assert by_id[2]["configs"]["small"]["eff"] == pytest.approx(0.3)
    assert by_id[3]["configs"]["big"]["candidate_ms"] == pytest.approx(1.7)  # mean of its two measurements
    assert by_id[3]["configs"]["big"]["eff"] == pytest.approx(0.6)
    assert by_id[3]["configs"]["small"]["eff"] == pytest.approx(0.5)
    assert by_id[4]["verified"] is False and by_id[2]["verified"] is True


def test_best_per_config_and_single_best_skip_the_seed_and_unverified(tmp_path, capsys):
    efficiency_table.main([str(_make_store(tmp_path))])
    out = capsys.readouterr().out
    rows = {
        line.split(" | ")[0].strip("| "): line for line in out.splitlines() if line.startswith(("| big", "| small"))
    }
    assert rows["big"].split(" | ")[2] == "2"  # id 2 (0.8), not the unverified id 4
    assert rows["small"].split(" | ")[2] == "3"  # id 3 (0.5)
    assert "one candidate for every config: id 3 " in out and "worst efficiency 0.50" in out


def test_a_candidate_that_changed_the_compute_is_not_shown_as_overlap_above_1(tmp_path, capsys):
    db = _make_store(tmp_path)
    con = sqlite3.connect(db)
    cur = con.execute(
        "insert into candidates (run_id, number, island, generation, operator, mutator, source_hash, descriptor_json, "
        "cell, status, correct, created_at) values ('r', 5, 0, 0, 'variant', 'design-space', 'h5', ?, '', 'done', 1, 0)",
        (json.dumps({"backend": "split_k"}),),
    )
    cid = cur.lastrowid
    verify = {"correct": True, "configs": [{"name": "big", "correct": True}, {"name": "hidden", "correct": True}]}
    con.execute(
        "insert into evaluations (candidate_id, run_id, stage, status, result_json, created_at) "
        "values (?, 'r', 'verify', 'ok', ?, 0)",
        (cid, json.dumps(verify)),
    )
    # small: 0.03 ms against a 0.08 ms bound, raw efficiency 3.5: a different (split-K) computation
    bench = {"configs": [_config("big", 2.0, 1.9, 1.5, 0.4), _config("small", 0.1, 0.03, 0.08, 0.02)]}
    con.execute(
        "insert into evaluations (candidate_id, run_id, stage, status, result_json, created_at) "
        "values (?, 'r', 'benchmark', 'ok', ?, 0)",
        (cid, json.dumps(bench)),
    )
    con.execute(
        "insert into timelines (candidate_id, config, figures_json, data) values (?, 'small', ?, x'00')",
        (cid, json.dumps({"ranks": [{"rank": 0, "compute_ms": 0.021}, {"rank": 1, "compute_ms": 0.024}]})),
    )
    con.commit()
    con.close()
    efficiency_table.main([str(db)])
    out = capsys.readouterr().out
    assert "3.50" not in out and "0.0300 (compute changed, own compute 0.024 ms)" in out
    best_small = next(line for line in out.splitlines() if line.startswith("| small"))
    assert best_small.split(" | ")[2] == str(cid) and "compute changed" in best_small
