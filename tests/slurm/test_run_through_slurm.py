"""`cuco run demo --cluster slurm.yaml` end to end through a real single-node Slurm: every build, verify
and benchmark is a Slurm job; stop leaves nothing queued; a job Slurm cancels, or a slurmd restart under it,
loses nothing; a SIGKILLed engine resumes and re-adopts its jobs without submitting any twice (jobcomp, and
sacct when the cluster has accounting); a partition Slurm does not know stops cuco with exit 2 naming the
field."""

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
import slurm_cluster

CLI = [sys.executable, "-m", "cuco_tui.cli"]
REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def cli(home: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + ["--home", str(home), *args], capture_output=True, text=True, timeout=timeout)


def start(home: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        CLI + ["--home", str(home), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )


def report(home: Path, run: str) -> dict:
    out = cli(home, "report", run, "--json", timeout=60)  # exit 1 for a run that did not finish
    return json.loads(out.stdout)


def run_jobs(slurm, run: str) -> list[tuple[str, str, str]]:
    """(job id, state, name) of this run's jobs still in the queue."""
    return [j for j in slurm.queue() if j[2].startswith(f"cuco.{run}-")]


def completed_names(slurm, run: str) -> collections.Counter:
    """How often each of this run's jobs completed in Slurm (jobcomp)."""
    return collections.Counter(
        j["Name"]
        for j in slurm.finished_jobs()
        if j.get("Name", "").startswith(f"cuco.{run}-") and j.get("JobState") == "COMPLETED"
    )


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
    assert nodes and all(n.startswith("slurm:") for n in nodes), nodes  # every job went through Slurm
    assert not (home / "jobs").exists()  # none ran here
    assert not run_jobs(slurm, "sl")
    done = completed_names(slurm, "sl")
    assert len(done) >= 3 * 30 and max(done.values()) == 1, done.most_common(3)  # none submitted twice
    # The store keeps each job's Slurm id (what a restarted engine re-adopts by)
    conn = sqlite3.connect(home / "cuco.db")
    stored = dict(conn.execute("SELECT id, external_id FROM jobs WHERE run_id='sl' AND executor='slurm'"))
    conn.close()
    by_name = {j["Name"]: j["JobId"] for j in slurm.finished_jobs() if j.get("Name", "").startswith("cuco.sl-")}
    assert len(stored) >= 3 * 30 and all(by_name.get(f"cuco.{job}") == sid for job, sid in stored.items()), stored


def test_stop_mid_run_leaves_no_job_in_squeue(slurm_yaml, slurm, tmp_path):
    """`cuco run` without --headless: a detached engine, stopped by `cuco stop` through its socket."""
    from cuco_tui.verbs.detached import run_detached
    from engine.config import RunConfig

    home = tmp_path / ".cuco"
    path = slurm_yaml()
    assert (
        run_detached(
            home,
            "st",
            REPO / "workloads" / "demo",
            RunConfig(max_evals=200, cluster=str(path)),
            str(path),
            attach=False,
        )
        == 0
    )
    pid = json.loads((home / "runs" / "st" / "run.json").read_text())["pid"]
    try:
        wait_until(lambda: any(j[1] == "RUNNING" for j in run_jobs(slurm, "st")))
        stop = cli(home, "stop", "st", timeout=120)
        assert stop.returncode == 0 and "done (engine)" in stop.stdout, stop.stdout + stop.stderr
        wait_until(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid, timeout=120)  # the daemon is our child
        pid = None
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
    assert not run_jobs(slurm, "st"), run_jobs(slurm, "st")
    rep = report(home, "st")
    assert rep["state"] == "stopped", rep["stop_reason"]


def cancel_from_outside(slurm, victim) -> None:
    slurm.cmd("scancel", victim[0])  # an administrator (or preemption) takes the job away


def restart_slurmd(slurm, victim) -> None:
    """slurmd stopped under the running job and started again 3 s later (jobs Slurm tries to start on the
    node meanwhile fail to launch)."""
    slurm.stop_slurmd()
    try:
        time.sleep(3)
    finally:
        slurm.start_slurmd()


@pytest.mark.parametrize("take_away, name", [(cancel_from_outside, "kl"), (restart_slurmd, "kd")])
def test_a_job_slurm_kills_is_run_again_and_nothing_is_lost(slurm_yaml, slurm, tmp_path, take_away, name):
    home = tmp_path / ".cuco"
    proc = start(home, "run", "demo", "--headless", "--cluster", str(slurm_yaml()), "--max-evals", "6", "--name", name)
    victim = wait_until(lambda: next((j for j in run_jobs(slurm, name) if j[1] == "RUNNING"), None), proc)
    take_away(slurm, victim)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err.decode()[-3000:]
    rep = report(home, name)
    assert rep["evaluated"] == 6 and rep["failed"] == 0, rep
    done = completed_names(slurm, name)
    assert done[victim[2]] == 1 and max(done.values()) == 1, done  # it ran to the end once
    assert not run_jobs(slurm, name)


def test_sigkilled_engine_resumes_and_re_adopts_its_jobs(slurm_yaml, slurm, tmp_path):
    """Killed while candidates' stages are in Slurm. (The frozen harness's objects are compiled by a job of
    the engine's own, once per engine process: the resumed engine compiles them again, under the name of
    the candidate that needs them first; that is not a stage submitted twice.)"""
    home = tmp_path / ".cuco"
    proc = start(home, "run", "demo", "--headless", "--cluster", str(slurm_yaml()), "--max-evals", "10", "--name", "rk")
    in_flight = wait_until(
        lambda: [
            j
            for j in run_jobs(slurm, "rk")
            if j[1] in ("RUNNING", "PENDING") and "-c0-" not in j[2] and not j[2].endswith("-frozen")
        ],
        proc,
    )
    proc.send_signal(signal.SIGKILL)  # the engine only: its Slurm jobs keep going
    proc.wait(30)
    resumed = start(home, "resume", "rk", "--headless")
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err.decode()[-3000:]
    rep = report(home, "rk")
    assert rep["state"] == "finished" and rep["evaluated"] == 10, rep
    done = completed_names(slurm, "rk")
    stages = {n: k for n, k in done.items() if not n.endswith("-frozen")}
    assert max(stages.values()) == 1, done.most_common(3)  # no stage ran twice
    assert all(done[j[2]] == 1 for j in in_flight), (in_flight, done)  # those in flight at the kill ran once
    assert not run_jobs(slurm, "rk")
    if not slurm.accounting:
        print(f"sacct check skipped: {slurm_cluster.accounting_skip_reason()}")
        return
    # Slurm's accounting: every stage submitted once; those in flight at the kill adopted (they ran to the
    # end: none cancelled and submitted again); each job the store holds has the Slurm id sacct gives its
    # name (what the resumed engine adopted it by).
    acct = slurm.sacct("cuco.rk-")
    names = collections.Counter(j["JobName"] for j in acct)
    assert all(k == 1 for n, k in names.items() if not n.endswith("-frozen")), names.most_common(3)
    state = {j["JobID"]: j["State"] for j in acct}
    assert all(state.get(j[0]) == "COMPLETED" for j in in_flight), (in_flight, acct)
    by_name = {j["JobName"]: j["JobID"] for j in acct}
    conn = sqlite3.connect(home / "cuco.db")
    stored = dict(conn.execute("SELECT id, external_id FROM jobs WHERE run_id='rk' AND executor='slurm'"))
    conn.close()
    assert len(stored) >= 3 * 10 and all(by_name.get(f"cuco.{job}") == sid for job, sid in stored.items()), stored
    frozen = [j for j in acct if j["JobName"].endswith("-frozen")]
    assert 1 <= len(frozen) <= 2, frozen  # once per engine process at most
    # a frozen-objects job in flight at the kill is kept on resume (not cancelled), like the stages
    assert all(j["State"] == "COMPLETED" for j in frozen), frozen


@pytest.mark.parametrize(
    "fields, field", [({"partition": "nosuch"}, "partition"), ({"build": {"partition": "nosuch"}}, "build.partition")]
)
def test_a_partition_that_does_not_exist_stops_cuco_with_exit_2(slurm_yaml, tmp_path, fields, field):
    path = slurm_yaml(**fields)
    out = cli(tmp_path / ".cuco", "run", "demo", "--headless", "--cluster", str(path), "--max-evals", "2", timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"{path}: {field}:" in out.stderr and "nosuch" in out.stderr and "Traceback" not in out.stderr
