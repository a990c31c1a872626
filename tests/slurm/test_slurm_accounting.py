"""Against the test Slurm with accounting (slurmdbd; tests/slurm/slurm_cluster.py): an account or QoS Slurm
does not know stops cuco at start with exit 2 naming the field, nothing submitted; the cluster's per-user job
limits (QoS `capped`) hold submissions back instead of failing candidates, and `max_jobs` keeps cuco under
them; `cuco nodes check` has the account and QoS accepted, or names the one refused."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter

import pytest
from slurm_cluster import ACCOUNT, CAPPED_QOS, CAPPED_SUBMIT

from remote.errors import InputError
from remote.jobs import JobSpec, JobStatus
from remote.registry import executor_from_file

CLI = [sys.executable, "-m", "cuco_tui.cli"]


def cli(home, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    # (wide enough that `cuco nodes check`'s table does not wrap the lines the tests look for)
    return subprocess.run(
        CLI + ["--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, COLUMNS="200"),
    )


async def started(path, home):
    ex = executor_from_file(path, home)
    await asyncio.wait_for(ex.start(), 60)
    return ex


# ---- an account or QoS Slurm does not know -------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"account": "nosuch"}, "account"),
        ({"run": {"account": "nosuch"}}, "run.account"),
        ({"qos": "nosuch"}, "qos"),
        ({"build": {"qos": "nosuch"}}, "build.qos"),
    ],
)
async def test_an_account_or_qos_slurm_does_not_know_is_an_input_error_naming_the_field(
    slurm_accounting, slurm_yaml, tmp_path, fields, field
):
    ex = executor_from_file(slurm_yaml(**fields), tmp_path / ".cuco")
    try:
        with pytest.raises(InputError) as err:
            await asyncio.wait_for(ex.start(), 60)
        assert err.value.field == field and "nosuch" in err.value.message, err.value
        assert "sacctmgr show assoc" in err.value.message  # where to find the right values
    finally:
        await ex.close()


@pytest.mark.slow
@pytest.mark.parametrize("key, words", [("account", "invalid account"), ("qos", "invalid qos")])
def test_cuco_run_with_an_unknown_account_or_qos_exits_2_at_start_and_submits_nothing(
    slurm_accounting, slurm_yaml, tmp_path, key, words
):
    path = slurm_yaml(**{key: "nosuch"})
    out = cli(
        tmp_path / ".cuco",
        "run",
        "demo",
        "--headless",
        "--cluster",
        str(path),
        "--max-evals",
        "2",
        "--name",
        f"bad{key}",
        timeout=120,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"{path}: {key}:" in out.stderr and "nosuch" in out.stderr and words in out.stderr.lower(), out.stderr
    assert "sacctmgr show assoc" in out.stderr and "Traceback" not in out.stderr
    assert slurm_accounting.sacct(f"cuco.bad{key}-") == []  # Slurm never saw a job of the run


# ---- the cluster's per-user job limits ------------------------------------------------------------------


async def test_a_qos_job_limit_holds_submissions_back_and_every_job_still_runs_once(
    slurm_accounting, slurm_yaml, tmp_path
):
    """QoS capped: 3 jobs per user queued or running, 1 running. Seven jobs at once: sbatch refuses the 4th
    (QOSMaxSubmitJobPerUserLimit) until one ends; the queued ones pend for QOSMaxJobsPerUserLimit. Every job
    ends OK, submitted exactly once, and the user is told which limit holds them back."""
    slurm = slurm_accounting
    ex = await started(slurm_yaml(qos=CAPPED_QOS, account=ACCOUNT), tmp_path / ".cuco")
    try:
        tasks = [
            asyncio.create_task(ex.run(JobSpec(f"q1-{i}-run", ["sh", "-c", f"sleep 0.5; echo {i}"], timeout_s=60)))
            for i in range(7)
        ]
        seen_pending, seen_note, most_queued = Counter(), set(), 0
        while not all(t.done() for t in tasks):
            state = ex.nodes()[0]
            seen_pending.update(state.pending)
            if "QOSMaxSubmitJobPerUserLimit" in state.detail:
                seen_note.add(state.detail)
            most_queued = max(
                most_queued,
                len([j for j in slurm.queue() if j[2].startswith("cuco.q1-") and j[1] in ("PENDING", "RUNNING")]),
            )
            await asyncio.sleep(0.1)
        results = [t.result() for t in tasks]
        assert all(r.status is JobStatus.OK and r.rc == 0 and r.log.strip() == str(i) for i, r in enumerate(results)), (
            results
        )
        assert seen_pending["QOSMaxJobsPerUserLimit"] > 0, seen_pending  # the queue said why
        assert seen_note and "max_jobs" in next(iter(seen_note)), seen_note  # and the node state too
        assert most_queued <= CAPPED_SUBMIT
        assert ex.submissions == 7 and ex.limit_refusals > 0
        names = Counter(j["JobName"] for j in slurm.sacct("cuco.q1-"))
        assert len(names) == 7 and set(names.values()) == {1}, names  # none submitted twice
    finally:
        await ex.close()


async def test_max_jobs_keeps_cuco_under_the_limit(slurm_accounting, slurm_yaml, tmp_path):
    ex = await started(slurm_yaml(qos=CAPPED_QOS, max_jobs=CAPPED_SUBMIT), tmp_path / ".cuco")
    try:
        results = await asyncio.wait_for(
            asyncio.gather(*(ex.run(JobSpec(f"q2-{i}-run", ["true"], timeout_s=60)) for i in range(5))), 120
        )
        assert all(r.ok for r in results), results
        assert ex.submissions == 5 and ex.limit_refusals == 0  # sbatch never had to refuse one
    finally:
        await ex.close()


async def test_a_limit_filled_by_jobs_outside_cuco_fails_the_job_as_the_environment_s_after_limit_wait_s(
    slurm_accounting, slurm_yaml, tmp_path
):
    """The user's own jobs (not cuco's) fill the QoS. Starting is fine (the QoS is valid; Slurm refuses the
    test submission only for the limit), and `cuco nodes check` warns. With none of cuco's jobs to wait
    for, a submission gives up after limit_wait_s with an error that names the limit; the engine counts
    that as the environment's fault (ERROR), never the candidate's."""
    from engine.evaluation import faults

    slurm = slurm_accounting
    theirs = [
        slurm.cmd(
            "sbatch",
            "--parsable",
            f"--qos={CAPPED_QOS}",
            "-p",
            "cpu",
            "-J",
            "not-cuco",
            "--output=/dev/null",
            "--wrap=sleep 300",
        ).strip()
        for _ in range(CAPPED_SUBMIT)
    ]
    try:
        path = slurm_yaml(qos=CAPPED_QOS, limit_wait_s=1.5)
        check = await asyncio.to_thread(cli, tmp_path / ".cuco", "nodes", "check", str(path), timeout=180)
        text = " ".join(check.stdout.split())
        assert check.returncode == 0 and f"run: --partition=gpu --qos={CAPPED_QOS} --gpus=1 accepted" in text, text
        assert "run jobs: Slurm refuses more jobs now (QOSMaxSubmitJobPerUserLimit)" in text, text
        ex = await started(path, tmp_path / ".cuco")
        try:
            assert "QOSMaxSubmitJobPerUserLimit" in ex.nodes()[0].detail  # said at start, not an error
            begun = time.monotonic()
            res = await asyncio.wait_for(ex.run(JobSpec("q3-run", ["true"], timeout_s=60)), 60)
            assert res.status is JobStatus.ERROR and time.monotonic() - begun >= 1.5, res
            assert "QOSMaxSubmitJobPerUserLimit" in res.error and "other jobs of yours" in res.error, res.error
            fault = faults.of_job("run", res)
            assert fault.environment, fault
            assert ex.submissions == 0 and slurm.sacct("cuco.q3-") == []
        finally:
            await ex.close()
    finally:
        slurm.cmd("scancel", *theirs)


@pytest.mark.slow
def test_cuco_run_under_a_qos_job_limit_finishes_and_says_which_limit_held_it(slurm_accounting, slurm_yaml, tmp_path):
    """Six evaluations in flight against a QoS that queues three jobs per user: the run finishes with no
    failed candidate, each job submitted once (sacct), and the engine's log names the limit."""
    home = tmp_path / ".cuco"
    out = cli(
        home,
        "run",
        "demo",
        "--headless",
        "--cluster",
        str(slurm_yaml(qos=CAPPED_QOS)),
        "--max-evals",
        "6",
        "--concurrency",
        "6",
        "--name",
        "qc",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "QOSMaxSubmitJobPerUserLimit" in out.stderr, out.stderr[-3000:]
    rep = cli(home, "report", "qc", "--json", timeout=60)
    rep = json.loads(rep.stdout)
    assert rep["state"] == "finished" and rep["evaluated"] == 6 and rep["failed"] == 0, rep
    names = Counter(j["JobName"] for j in slurm_accounting.sacct("cuco.qc-"))
    assert len(names) >= 3 * 6 and set(names.values()) == {1}, names.most_common(3)


# ---- cuco nodes check ---------------------------------------------------------------------------------


def test_nodes_check_has_the_account_and_qos_accepted(slurm_accounting, slurm_yaml, tmp_path):
    out = cli(tmp_path / ".cuco", "nodes", "check", str(slurm_yaml(account=ACCOUNT, qos=CAPPED_QOS)), timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    text = " ".join(out.stdout.split())
    assert f"run: --partition=gpu --account={ACCOUNT} --qos={CAPPED_QOS} --gpus=1 accepted" in text, text
    assert f"build: --partition=cpu --account={ACCOUNT} --qos={CAPPED_QOS} accepted" in text, text


def test_nodes_check_names_an_account_slurm_refuses(slurm_accounting, slurm_yaml, tmp_path):
    path = slurm_yaml(run={"account": "nosuch"})
    out = cli(tmp_path / ".cuco", "nodes", "check", str(path), timeout=180)
    assert out.returncode == 1, out.stdout + out.stderr
    text = " ".join(out.stdout.split())
    assert f"run.account in {path}" in text and "invalid account" in text.lower(), text
    assert "build: --partition=cpu accepted" in text  # the stage that uses no bad value passes


def test_nodes_check_lists_cuco_jobs_pending_for_the_qos_job_limit(slurm_accounting, slurm_yaml, tmp_path):
    """Two cuco jobs under the capped QoS (one running at a time): the second pends for
    QOSMaxJobsPerUserLimit, and `cuco nodes check` says so."""
    slurm = slurm_accounting
    ids = [
        slurm.cmd(
            "sbatch",
            "--parsable",
            f"--qos={CAPPED_QOS}",
            "-p",
            "gpu",
            "-J",
            f"cuco.nc-{i}-run",
            "--output=/dev/null",
            "--wrap=sleep 120",
        ).strip()
        for i in range(2)
    ]
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "QOSMaxJobsPerUserLimit" not in slurm.cmd(
            "squeue", "-h", "-j", ",".join(ids), "-o", "%r"
        ):
            time.sleep(0.2)
        out = cli(tmp_path / ".cuco", "nodes", "check", str(slurm_yaml()), timeout=180)
        assert out.returncode == 0, out.stdout + out.stderr
        text = " ".join(out.stdout.split())
        assert "cuco jobs pending │ 1: QOSMaxJobsPerUserLimit" in text, out.stdout
        assert "shared with the compute nodes │ yes" in text, out.stdout
    finally:
        slurm.cmd("scancel", *ids)
