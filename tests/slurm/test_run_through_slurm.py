"""`cuco run demo --cluster slurm.yaml` end to end through a real single-node Slurm: every build, verify
and benchmark is a Slurm job; stop leaves nothing queued; a job Slurm loses is run again; a SIGKILLed
engine resumes and re-adopts its jobs without submitting any twice; a partition Slurm does not know
stops cuco with exit 2 naming the field."""

from __future__ import annotations

import collections
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "cuco_tui.cli"]
REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def cli(home: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + ["--home", str(home), *args], capture_output=True, text=True, timeout=timeout)


def start(home: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(CLI + ["--home", str(home), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)


def report(home: Path, run: str) -> dict:
    out = cli(home, "report", run, "--json", timeout=60)   # exit 1 for a run that did not finish
    return json.loads(out.stdout)


def run_jobs(slurm, run: str) -> list[tuple[str, str, str]]:
    """(job id, state, name) of this run's jobs still in the queue."""
    return [j for j in slurm.queue() if j[2].startswith(f"cuco.{run}-")]


def completed_names(slurm, run: str) -> collections.Counter:
    """How often each of this run's jobs completed in Slurm (jobcomp)."""
    return collections.Counter(j["Name"] for j in slurm.finished_jobs()
                               if j.get("Name", "").startswith(f"cuco.{run}-") and j.get("JobState") == "COMPLETED")


def wait_until(pred, proc: subprocess.Popen | None = None, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"cuco exited early: {proc.stderr.read().decode()[-3000:]}")
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


def evaluation_nodes(home: Path) -> set[str]:
    conn = sqlite3.connect(home / "cuco.db")
    try:
        return {n for (n,) in conn.execute("SELECT DISTINCT node FROM evaluations")}
    finally:
        conn.close()


def test_demo_runs_through_slurm(slurm_yaml, slurm, tmp_path):
    home = tmp_path / ".cuco"
    out = cli(home, "run", "demo", "--headless", "--cluster", str(slurm_yaml()), "--max-evals", "30", "--name", "sl")
    assert out.returncode == 0, out.stderr[-3000:]
    rep = report(home, "sl")
    assert rep["state"] == "finished" and rep["evaluated"] == 30 and rep["failed"] == 0, rep
    assert rep["best"]["speedup"] > 0
    nodes = evaluation_nodes(home)
    assert nodes and all(n.startswith("slurm:") for n in nodes), nodes   # every job went through Slurm
    assert not (home / "jobs").exists()                                  # none ran here
    assert not run_jobs(slurm, "sl")
    done = completed_names(slurm, "sl")
    assert len(done) >= 3 * 30 and max(done.values()) == 1, done.most_common(3)   # none submitted twice
    # The store keeps each job's Slurm id (what a restarted engine re-adopts by)
    conn = sqlite3.connect(home / "cuco.db")
    stored = dict(conn.execute("SELECT id, external_id FROM jobs WHERE run_id='sl' AND executor='slurm'"))
    conn.close()
    by_name = {j["Name"]: j["JobId"] for j in slurm.finished_jobs() if j.get("Name", "").startswith("cuco.sl-")}
    assert len(stored) >= 3 * 30 and all(by_name.get(f"cuco.{job}") == sid for job, sid in stored.items()), stored


def test_stop_mid_run_leaves_no_job_in_squeue(slurm_yaml, slurm, tmp_path):
    """`cuco run` without --headless: a detached engine, stopped by `cuco stop` through its socket."""
    from cuco_tui.cli_control import run_detached
    from engine.config import RunConfig

    home = tmp_path / ".cuco"
    path = slurm_yaml()
    assert run_detached(home, "st", REPO / "workloads" / "demo", RunConfig(max_evals=200, cluster=str(path)),
                        str(path), attach=False) == 0
    pid = json.loads((home / "runs" / "st" / "run.json").read_text())["pid"]
    try:
        wait_until(lambda: any(j[1] == "RUNNING" for j in run_jobs(slurm, "st")))
        stop = cli(home, "stop", "st", timeout=120)
        assert stop.returncode == 0 and "done (engine)" in stop.stdout, stop.stdout + stop.stderr
        wait_until(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid, timeout=120)   # the daemon is our child
        pid = None
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
    assert not run_jobs(slurm, "st"), run_jobs(slurm, "st")
    rep = report(home, "st")
    assert rep["state"] == "stopped", rep["stop_reason"]


def test_a_job_slurm_cancels_is_run_again_and_nothing_is_lost(slurm_yaml, slurm, tmp_path):
    home = tmp_path / ".cuco"
    proc = start(home, "run", "demo", "--headless", "--cluster", str(slurm_yaml()), "--max-evals", "6",
                 "--name", "kl")
    victim = wait_until(lambda: next((j for j in run_jobs(slurm, "kl") if j[1] == "RUNNING"), None), proc)
    slurm.cmd("scancel", victim[0])   # an administrator (or preemption) takes the job away
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err.decode()[-3000:]
    rep = report(home, "kl")
    assert rep["evaluated"] == 6 and rep["failed"] == 0, rep
    assert completed_names(slurm, "kl")[victim[2]] == 1      # it ran to the end once, after the cancel


def test_sigkilled_engine_resumes_and_re_adopts_its_jobs(slurm_yaml, slurm, tmp_path):
    home = tmp_path / ".cuco"
    proc = start(home, "run", "demo", "--headless", "--cluster", str(slurm_yaml()), "--max-evals", "10",
                 "--name", "rk")
    in_flight = wait_until(lambda: [j for j in run_jobs(slurm, "rk") if j[1] in ("RUNNING", "PENDING")
                                    and "-c0-" not in j[2]], proc)
    proc.send_signal(signal.SIGKILL)        # the engine only: its Slurm jobs keep going
    proc.wait(30)
    resumed = start(home, "resume", "rk", "--headless")
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err.decode()[-3000:]
    rep = report(home, "rk")
    assert rep["state"] == "finished" and rep["evaluated"] == 10, rep
    done = completed_names(slurm, "rk")
    assert max(done.values()) == 1, done.most_common(3)       # no job ran twice
    assert any(done[j[2]] == 1 for j in in_flight), (in_flight, done)   # a job in flight at the kill was adopted
    assert not run_jobs(slurm, "rk")


@pytest.mark.parametrize("fields, field", [({"partition": "nosuch"}, "partition"),
                                           ({"build": {"partition": "nosuch"}}, "build.partition")])
def test_a_partition_that_does_not_exist_stops_cuco_with_exit_2(slurm_yaml, tmp_path, fields, field):
    path = slurm_yaml(**fields)
    out = cli(tmp_path / ".cuco", "run", "demo", "--headless", "--cluster", str(path), "--max-evals", "2",
              timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"{path}: {field}:" in out.stderr and "nosuch" in out.stderr and "Traceback" not in out.stderr
