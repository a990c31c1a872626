"""init attaches the rewrites as design-space points the design-space mutator moves to, and a candidate
at such a point goes back into the user's files as a patch that applies and compiles; a candidate edited
beyond its point's rewrites is refused with where it differs."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine import blocks
from engine.candidate_view import CandidateView
from engine.onboard.export_patch import patch_for
from engine.onboard.rewrites import RewriteError
from engine.search.mutators.design_space import DesignSpaceMutator
from engine.workload import load_workload

HERE = Path(__file__).parent
CLI = [sys.executable, "-m", "cuco_tui.cli"]


def init(tmp_path, program: Path) -> Path:
    src = tmp_path / "program"
    shutil.copytree(program.parent, src)
    out = tmp_path / "workload"
    r = subprocess.run(
        [*CLI, "init", program.name, "--ranks", "2", "-o", str(out)],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return out


def test_init_makes_each_offered_set_of_rewrites_a_point_the_mutator_moves_to(tmp_path):
    out = init(tmp_path, HERE / "programs" / "halo.cu")
    spec = yaml.safe_load((out / "workload.yaml").read_text())
    dim = spec["design_space"]["dimensions"]["rewrites"]
    assert dim == {
        "values": [
            "none",
            "boundary_first",
            "lsa_sendrecv",
            "graph_replay",
            "boundary_first+lsa_sendrecv",
            "boundary_first+graph_replay",
            "lsa_sendrecv+graph_replay",
            "boundary_first+lsa_sendrecv+graph_replay",
        ],
        "default": "none",
    }
    assert spec["program"]["rewrites"] == [
        "boundary_first",
        "nccl_register",
        "comm_config",
        "lsa_sendrecv",
        "graph_replay",
    ]
    workload = load_workload(out)
    seed = (out / "candidate.cu").read_text()
    mutator = DesignSpaceMutator(workload.design_space, seed)
    parent = CandidateView(1, seed, workload.design_space.descriptor(seed), "correct", 0, 0, "seed")
    reached = set()
    rng = random.Random(7)
    for _ in range(60):
        child = mutator._structural(parent, rng)
        if child is not None:
            reached.add(workload.design_space.descriptor(child).get("rewrites"))
    assert {"boundary_first", "lsa_sendrecv", "graph_replay", "boundary_first+graph_replay"} <= reached


def _at_point(out: Path, point: str) -> str:
    seed = (out / "candidate.cu").read_text()
    spec = yaml.safe_load((out / "workload.yaml").read_text())
    v = next(v for v in spec["variants"] if v["point"]["rewrites"] == point)
    return blocks.replace_blocks(seed, blocks.block_bodies((out / v["file"]).read_text()))


def test_a_candidate_at_a_rewrite_point_patches_the_users_file(tmp_path):
    out = init(tmp_path, HERE / "programs" / "halo.cu")
    source = _at_point(out, "boundary_first+graph_replay")
    assert "// boundary_first: launch_relax (candidate.cu:" in source  # the candidate says what was done
    source = blocks.set_knob(source, "chunks", "4")  # knobs the schedule does not use may move freely
    diff, notes = patch_for(source, out, "candidate 7")
    assert diff.startswith("--- a/halo.cu\n+++ b/halo.cu\n")
    assert [n.split(":")[0] for n in notes] == ["boundary_first", "graph_replay"]
    r = subprocess.run(
        ["patch", "-p1", "--dry-run"], input=diff, text=True, cwd=tmp_path / "program", capture_output=True, timeout=30
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_candidate_edited_beyond_its_point_is_refused(tmp_path):
    out = init(tmp_path, HERE / "programs" / "halo.cu")
    source = _at_point(out, "graph_replay").replace(
        "cudaGraphLaunch(cuco_exec, stream)", "cudaGraphLaunch(cuco_exec, stream); /* tuned */"
    )
    with pytest.raises(
        RewriteError,
        match="schedule block differs from the rewrites at its point .rewrites=graph_replay. "
        "at .*tuned.*cannot be written back",
    ):
        patch_for(source, out, "candidate 9")


def test_the_seed_and_a_changed_program_are_refused(tmp_path):
    out = init(tmp_path, HERE / "programs" / "halo.cu")
    with pytest.raises(RewriteError, match="it is your program as it is"):
        patch_for((out / "candidate.cu").read_text(), out, "candidate 1")
    user = tmp_path / "program" / "halo.cu"
    user.write_text(user.read_text() + "\n// edited after init\n")
    with pytest.raises(RewriteError, match="halo.cu: changed since cuco init"):
        patch_for(_at_point(out, "graph_replay"), out, "candidate 2")


def _store_with(home: Path, workload: Path, sources: list[str]) -> None:
    """A run of the workload in the real store, its candidates the given sources (the seed first)."""
    import asyncio
    import time

    from engine.store.store import Store

    async def fill():
        store = await Store(home).open()
        now = time.time()
        async with store.transaction() as tx:
            await tx.execute(
                "INSERT INTO runs (id, workload, workload_path, state, config_json, created_at, "
                "updated_at) VALUES (?, ?, ?, 'finished', '{}', ?, ?)",
                ("r1", workload.name, str(workload), now, now),
            )
            for i, src in enumerate(sources):
                await tx.execute(
                    "INSERT INTO candidates (run_id, number, island, generation, operator, mutator, "
                    "source_hash, descriptor_json, cell, status, correct, speedup, fitness, created_at) "
                    "VALUES ('r1', ?, 0, 0, 'variant', 'design-space', ?, '{}', '', 'correct', 1, ?, ?, ?)",
                    (i, store.blobs.put_text(src), 1.0 + i, 1.0 + i, now),
                )
        await store.close()

    asyncio.run(fill())


def test_cuco_export_patch_writes_a_candidate_into_the_users_folder(tmp_path):
    out = init(tmp_path, HERE / "programs" / "halo.cu")
    seed = (out / "candidate.cu").read_text()
    best = _at_point(out, "boundary_first+graph_replay")
    home = tmp_path / "home"
    _store_with(home, out, [seed, best])
    patch = tmp_path / "best.patch"
    r = subprocess.run(
        [*CLI, "export", "r1", "--patch", "--candidate", "2", "-o", str(patch), "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "note boundary_first:" in r.stderr and "note graph_replay:" in r.stderr
    r = subprocess.run(
        ["patch", "-p1", "-i", str(patch)], cwd=tmp_path / "program", capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0, r.stdout + r.stderr
    text = (tmp_path / "program" / "halo.cu").read_text()
    assert "cudaStreamCreateWithPriority(&cuco_comm_stream" in text and "cudaGraphLaunch(cuco_exec, stream)" in text
    r = subprocess.run(
        [*CLI, "export", "r1", "--patch", "--candidate", "1", "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "it is your program as it is" in r.stderr
