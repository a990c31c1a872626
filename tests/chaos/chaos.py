"""What the chaos suite (tests/chaos/) and its long form (tests/bench/chaos_kills.py) share: start the real
`cuco` command on a project home, SIGKILL it at random moments, and check a finished run's store for what
must hold after any crash."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

CLI = [sys.executable, "-m", "cuco_tui.cli"]
# How often a stage may be recorded for one candidate: once, and the benchmark a second time when it was
# re-measured as a would-be best (on fresh inputs).
AT_MOST = {"build": 1, "verify": 1, "benchmark": 2}


def cuco_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "CUCO_HOME"}


def start(home: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        CLI + ["--home", str(home), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=cuco_env(),
    )


def cuco(home: Path, *args: str, timeout: float = 120, columns: int = 200) -> subprocess.CompletedProcess:
    return subprocess.run(
        CLI + ["--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**cuco_env(), "COLUMNS": str(columns)},
    )


def query(db: Path, sql: str, params: tuple = ()) -> list[tuple]:
    if not db.exists():
        return []
    from engine.store.store_check import connect_for_reading

    conn = connect_for_reading(db, 30)
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def finals(db: Path, run: str) -> int:
    rows = query(db, "SELECT COUNT(*) FROM candidates WHERE run_id=? AND status NOT IN ('pending','running')", (run,))
    return rows[0][0] if rows else 0


def last_seq(db: Path) -> int:
    rows = query(db, "SELECT COALESCE(MAX(seq), 0) FROM events")
    return rows[0][0] if rows else 0


@dataclass
class KillLog:
    kills: int = 0
    killed_at_finals: list[int] = field(default_factory=list)
    seconds: float = 0.0


def random_kills(
    home: Path,
    run: str,
    max_evals: int,
    kills: int,
    rng: random.Random,
    *,
    workload: str = "demo",
    extra: tuple[str, ...] = (),
    timeout_s: float = 900,
) -> KillLog:
    """Start the run, then SIGKILL its engine `kills` times at random moments (each after a resume), then
    let the last resume finish. Only the engine is killed: its jobs are orphaned, as in a real crash."""
    log = KillLog()
    started = time.monotonic()
    db = home / "cuco.db"
    args = ("run", workload, "--headless", "--max-evals", str(max_evals), "--name", run, *extra)
    for _ in range(kills):
        created = bool(query(db, "SELECT 1 FROM runs WHERE id=?", (run,)))
        proc = start(home, "resume", run, "--headless") if created else start(home, *args)
        # One kill in five lands during start-up (the interpreter, the store, reconciling); the others once
        # the engine has written something new and finished 0-2 more evaluations, then anywhere in the next.
        if rng.random() >= 0.2:
            last, target = last_seq(db), finals(db, run) + rng.randint(0, 2)
            while (
                (last_seq(db) == last or finals(db, run) < min(target, max_evals - 1))
                and proc.poll() is None
                and time.monotonic() - started < timeout_s
            ):
                time.sleep(0.02)
        deadline = time.monotonic() + rng.uniform(0.0, 2.0)
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        if proc.poll() is not None:  # it finished (or failed) before its kill: start the next from there
            err = proc.stderr.read().decode()
            assert proc.returncode in (0,), f"the engine exited {proc.returncode}: {err[-2000:]}"
            if finals(db, run) >= max_evals:
                break
            continue
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        proc.stderr.close()
        log.kills += 1
        log.killed_at_finals.append(finals(db, run))
        assert time.monotonic() - started < timeout_s, "the run made no progress"
    if finals(db, run) < max_evals or query(db, "SELECT state FROM runs WHERE id=?", (run,))[0][0] != "finished":
        proc = start(home, "resume", run, "--headless")
        _, err = proc.communicate(timeout=max(60.0, timeout_s - (time.monotonic() - started)))
        assert proc.returncode == 0, err.decode()[-3000:]
    log.seconds = time.monotonic() - started
    return log


def check_invariants(home: Path, run: str, max_evals: int) -> dict[str, int]:
    """What must hold after any number of crashes and resumes; returns the counts that were checked."""
    db = home / "cuco.db"
    ((state,),) = query(db, "SELECT state FROM runs WHERE id=?", (run,))
    assert state == "finished", state
    rows = query(
        db, "SELECT id, number, status, source_hash, origin_id FROM candidates WHERE run_id=? ORDER BY number", (run,)
    )
    numbers = [r[1] for r in rows]
    assert numbers == list(range(len(rows))), f"a proposal was lost or duplicated: numbers {numbers}"
    assert len({r[3] for r in rows}) == len(rows), "the same source was proposed twice"
    own = [r for r in rows if r[4] is None]  # a fork's generation 0 is copies, evaluated in its parent
    assert len(own) == max_evals, f"{len(own)} candidates for --max-evals {max_evals}"
    check_events(db, run, [r[0] for r in own])
    unfinished = [r for r in rows if r[2] in ("pending", "running")]
    assert not unfinished, f"candidates never evaluated: {unfinished}"
    stages = 0
    for cid, *_ in own:
        ran = [
            s
            for (s,) in query(
                db,
                "SELECT stage FROM evaluations WHERE candidate_id=? AND COALESCE(fault, '') != 'environment'",
                (cid,),
            )
        ]
        for stage, most in AT_MOST.items():
            assert ran.count(stage) <= most, f"candidate {cid}: {stage} recorded {ran.count(stage)} times"
        assert ran.count("build") == 1, f"candidate {cid} has no build recorded"
        stages += len(ran)
    seqs = [s for (s,) in query(db, "SELECT seq FROM events ORDER BY seq")]
    assert len(seqs) == len(set(seqs)), "an event seq was handed out twice"
    blamed = query(
        db,
        "SELECT id, reason FROM candidates WHERE run_id=? AND status IN ('failed','incorrect') "
        "AND COALESCE(fault, 'candidate') != 'candidate'",
        (run,),
    )
    assert not blamed, f"failed for the environment: {blamed}"
    left = leftover_processes(home)
    assert not left, f"processes of the run left behind: {[describe(pid) for pid in left]}"
    report = cuco(home, "report", run, "--json")
    import json

    data = json.loads(report.stdout)
    assert data["evaluated"] == max_evals and data["pending"] == 0, data
    return {"candidates": len(rows), "stages": stages, "events": len(seqs)}


def check_events(db: Path, run: str, own: list[int]) -> None:
    """Each candidate the run proposed has exactly one `candidate` event and one `result` event of its run:
    none lost, none written twice (another engine writing beside it included)."""
    import json

    told: dict[str, list[int]] = {"candidate": [], "result": []}
    for kind, data in query(
        db, "SELECT kind, data_json FROM events WHERE run_id=? AND kind IN ('candidate', 'result') ORDER BY seq", (run,)
    ):
        told[kind].append(json.loads(data)["id"])
    for kind, ids in told.items():
        assert sorted(ids) == sorted(own), f"{run}: {kind} events {sorted(ids)} for candidates {sorted(own)}"


def describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f"{pid}: " + f.read().replace(b"\0", b" ").decode(errors="replace")[:300]
    except OSError:
        return f"{pid}: (gone)"


def leftover_processes(home: Path) -> list[int]:
    """Live processes (not zombies) whose working directory or command line is inside the project home."""
    home = str(Path(home).resolve())
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            cwd = os.readlink(f"/proc/{pid}/cwd")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if cwd.startswith(home) or home in cmd:
            out.append(int(pid))
    return out
