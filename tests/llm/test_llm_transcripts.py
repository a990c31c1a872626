"""Recorded transcripts replayed through the OpenAI-compatible test server (tests/llm/transcripts.py): every
prompt cuco makes must be the one that was answered (else the failure names the fixture to refresh), and
the answers must lead where they led when recorded."""

from __future__ import annotations

import shutil
import sqlite3

import pytest
from transcripts import fixtures, play


def test_the_demo_transcript_replays_to_a_faster_program_through_a_failure_and_its_repair(tmp_path):
    replay, outcome, home = play("demo", "replay", tmp_path)
    assert not replay.problems, "\n".join(replay.problems)
    assert outcome.ok and not outcome.missing_benchmarks, outcome.log
    assert replay.calls == len(fixtures("demo")) == 8
    db = sqlite3.connect(f"file:{home / 'cuco.db'}?mode=ro", uri=True)
    rows = db.execute("SELECT id, parent_id, operator, status, speedup, reason FROM candidates ORDER BY id").fetchall()
    db.close()
    seed = rows[0]
    failed = [r for r in rows if r[3] == "failed"]
    assert len(rows) == 9 and len(failed) == 1 and "was not declared" in failed[0][5]
    repaired = [r for r in rows if r[2] == "llm-repair"]
    assert repaired and repaired[0][1] == failed[0][0] and repaired[0][3] == "done"
    assert max(r[4] or 0 for r in rows[1:] if r[3] == "done") > seed[4], "no child beat the seed"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed: the transform's answers are built")
def test_the_gemm_transform_transcript_builds_after_its_compiler_error(tmp_path):
    replay, outcome, home = play("gemm_transform", "replay", tmp_path)
    assert not replay.problems, "\n".join(replay.problems)
    assert outcome.ok, outcome.log
    assert replay.calls == len(fixtures("gemm_transform"))
    assert (home / "gemm_device.cu").is_file()
