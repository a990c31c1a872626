"""The job sandbox (remote/sandbox.py), on every executor's path: a job's environment holds no secret, it
sees no other process (no /proc/PID/environ of the engine's), and it writes only its own directory.

The spy candidate assumes the symbol policy was got round (the workload allows the file calls it makes,
as a computed pointer would): the sandbox must hold on its own. Real g++, the real cascade, a real local
executor, the real remote wrapper run by a real shell.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from engine import blocks
from engine.evaluation import faults
from engine.evaluation.evaluation import evaluate_source
from engine.stages import VERIFY
from engine.workload import load_workload
from remote.jobs import JobSpec
from remote.local import LocalExecutor
from remote.remote_job import read_result, run_script
from remote.sandbox import NO_SANDBOX_EXIT, PARTIAL_NOTICE

CANARY = "sk-ant-CANARY-sandbox-0123456789"
RUN_HEAD = 'extern "C" int cuco_run(const cuco_problem* p) {\n'

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the spy is compiled")


@pytest.fixture
def engine_with_key(monkeypatch):
    """A process holding the canary in its initial environment (the engine, as a job would see it) and
    the canary in this process's environment too."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    monkeypatch.setenv("MY_SERVICE_TOKEN", CANARY + "-token")
    monkeypatch.setenv("SOME_APP_SETTING", "not-on-the-allow-list")
    proc = subprocess.Popen(["sleep", "60"], env={**os.environ})
    yield proc
    proc.kill()
    proc.wait()


def probe_script(engine_pid: int, outside: list[Path]) -> str:
    writes = "; ".join(f"(echo x > {p}) 2>/dev/null && echo WROTE {p}" for p in outside)
    return (
        f"env; echo ENVIRON-START; cat /proc/{engine_pid}/environ /proc/1/environ 2>/dev/null | tr '\\0' '\\n'; "
        f"echo ENVIRON-END; ls -d /proc/[0-9]* | wc -l | sed 's/^/PIDS /'; grep CapEff /proc/self/status; {writes}; "
        "echo inside > /tmp/own && echo TMP-OK; echo mine > ./own && echo JOB-OK"
    )


def check_probe(log: str, outside: list[Path]) -> None:
    assert CANARY not in log
    assert "not-on-the-allow-list" not in log  # an allow-list, not a deny-list
    assert "PATH=" in log and "JOB-OK" in log and "TMP-OK" in log
    pids = int(log.split("PIDS ", 1)[1].split()[0])
    assert pids <= 8, f"the job saw {pids} processes: its /proc is not its own"
    for p in outside:  # /tmp is the job's own: what it writes there stays there
        assert f"WROTE {p}" not in log or str(p).startswith("/tmp/cuco-escape")
        assert not p.exists(), f"the job wrote {p}"


def outside_paths(tmp_path: Path) -> list[Path]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return [home / "pwned", Path("/tmp") / f"cuco-escape-{os.getpid()}"]


async def test_local_job_sees_no_secret_no_process_and_writes_only_its_directory(engine_with_key, tmp_path):
    outside = outside_paths(tmp_path)
    ex = LocalExecutor(work_dir=tmp_path / "jobs", cpu_slots=1, gpus=[])
    try:
        res = await ex.run(
            JobSpec(
                "probe",
                ["sh", "-c", probe_script(engine_with_key.pid, outside)],
                outputs=["own"],
                env={"CUCO_JOB_SETTING": "kept"},
            )
        )
    finally:
        await ex.close()
    assert res.ok, res.log
    check_probe(res.log, outside)
    assert "CUCO_JOB_SETTING=kept" in res.log  # what the job itself sets survives
    # no capability, even when the engine runs as root (bwrap keeps a root caller's unless told), but the
    # three a cpu job's harness needs to run the candidate's ranks under a uid of their own
    want = "00000000000000e0" if os.geteuid() == 0 else "0000000000000000"
    assert f"CapEff:\t{want}" in res.log, res.log
    assert res.outputs["own"] == b"mine\n"
    assert "no sandbox" not in res.log


def fake_bwrap(tmp_path: Path) -> str:
    """A PATH on which bwrap exists but does not work."""
    fake = tmp_path / "fakebin"
    fake.mkdir(exist_ok=True)
    (fake / "bwrap").write_text("#!/bin/sh\nexit 1\n")
    (fake / "bwrap").chmod(0o755)
    return f"{fake}:{os.environ['PATH']}"


async def test_without_bwrap_no_job_runs_unless_a_weaker_sandbox_is_named(engine_with_key, tmp_path):
    ex = LocalExecutor(work_dir=tmp_path / "jobs", cpu_slots=1, gpus=[], extra_env={"PATH": fake_bwrap(tmp_path)})
    try:
        res = await ex.run(JobSpec("probe", ["sh", "-c", "echo RAN"]))
    finally:
        await ex.close()
    assert res.rc == NO_SANDBOX_EXIT and "RAN" not in res.log, res.log
    assert "install bubblewrap" in res.log and "CUCO_SANDBOX=unshare" in res.log
    fault = faults.of_job("verify", res)
    assert fault is not None and fault.environment and fault.persistent, fault


async def test_unshare_when_the_node_names_it(engine_with_key, tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("util-linux unshare is not on PATH")
    outside = [Path("/tmp") / f"cuco-escape-unshare-{os.getpid()}"]
    ex = LocalExecutor(
        work_dir=tmp_path / "jobs",
        cpu_slots=1,
        gpus=[],
        extra_env={"PATH": fake_bwrap(tmp_path), "CUCO_SANDBOX": "unshare"},
    )
    try:
        res = await ex.run(JobSpec("probe", ["sh", "-c", probe_script(engine_with_key.pid, outside)]))
    finally:
        await ex.close()
    assert res.ok, res.log
    assert PARTIAL_NOTICE in res.log
    check_probe(res.log, outside)


async def test_a_job_sees_the_toolchain_and_its_directory_not_the_node_users_files(monkeypatch, tmp_path, request):
    """A node user's key in a home of their own, /proc/sys, the rest of /: none of it is the job's to see."""
    # not under /tmp, which every job sees as its own (empty) directory anyway
    home = Path(tempfile.mkdtemp(prefix="cuco-nodeuser-", dir="/var/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(home, ignore_errors=True))
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_test").write_text(f"-----BEGIN KEY----- {CANARY}-ssh\n")
    monkeypatch.setenv("HOME", str(home))
    script = (
        f"cat {home}/.ssh/id_test $HOME/.ssh/id_test 2>&1; echo ROOT $(ls /); "
        "(echo cuco > /proc/sys/kernel/domainname) 2>/dev/null && echo SYSCTL-WRITTEN; "
        "cat /etc/shadow 2>/dev/null | head -c 1 | wc -c | sed 's/^/SHADOW /'; "
        "command -v g++ >/dev/null && echo TOOLCHAIN-OK; echo x > own && echo JOB-OK"
    )
    ex = LocalExecutor(work_dir=tmp_path / "jobs", cpu_slots=1, gpus=[])
    try:
        res = await ex.run(JobSpec("view", ["sh", "-c", script], outputs=["own"]))
    finally:
        await ex.close()
    assert res.ok, res.log
    assert CANARY not in res.log, res.log
    assert "SYSCTL-WRITTEN" not in res.log and "SHADOW 0" in res.log, res.log
    assert "TOOLCHAIN-OK" in res.log and "JOB-OK" in res.log, res.log
    root = next(line for line in res.log.splitlines() if line.startswith("ROOT ")).split()[1:]
    assert "usr" in root and not {"var", "opt", "home", "mnt", "srv"} & set(root), root


def test_remote_wrapper_filters_the_nodes_environment_and_sandboxes(engine_with_key, tmp_path):
    """The script SSH and Slurm jobs run on a node, run here by sh with the canary in the node's
    environment (a node user's key): the job sees none of it."""
    outside = outside_paths(tmp_path)
    work = tmp_path / "node"
    script = run_script(
        str(work),
        "probe",
        [],
        ["sh", "-c", probe_script(engine_with_key.pid, outside)],
        {"CUDA_VISIBLE_DEVICES": "0"},
        [],
        30.0,
        1.0,
        ["own"],
    )
    out = subprocess.run(["sh", "-c", script], capture_output=True, timeout=60, env={**os.environ})
    assert out.returncode == 0, out.stderr
    members = read_result(out.stdout)
    log = members["logtail"].decode()
    assert members["rc"].strip() == b"0", log
    check_probe(log, outside)
    assert "CUDA_VISIBLE_DEVICES=0" in log
    assert members["work/own"] == b"mine\n"


SPY_DECLS = """typedef struct _IO_FILE FILE;
extern "C" FILE* fopen(const char*, const char*);
extern "C" unsigned long fread(void*, unsigned long, unsigned long, FILE*);
extern "C" int fclose(FILE*);
extern "C" int fputs(const char*, FILE*);
extern "C" int printf(const char*, ...);
extern "C" int fflush(FILE*);
"""
SPY = """  {{   // every rank: a rank that returned alone would leave the others at a barrier
    static char buf[1 << 16];
    int found = 0;
    const char* environs[] = {{"/proc/{pid}/environ", "/proc/{ppid}/environ", "/proc/1/environ"}};
    for (const char* path : environs)
      if (FILE* f = fopen(path, "rb")) {{
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i + 18 < n; ++i)
          if (!memcmp(buf + i, "ANTHROPIC_API_KEY=", 18)) {{ printf("stolen: %s\\n", buf + i); found = 1; }}
      }}
    const char* targets[] = {{{targets}}};
    for (const char* t : targets)
      if (FILE* f = fopen(t, "w")) {{ fputs("x", f); fclose(f); printf("wrote %s\\n", t); found = 1; }}
    fflush(nullptr);
    if (!found) return 7;   // nothing to steal, nowhere to write: the job fails, its log goes to the LLM
  }}
"""


@needs_gxx
def test_a_spy_candidate_steals_nothing_and_writes_nowhere(engine_with_key, tmp_path):
    base = load_workload("demo")
    folder = tmp_path / "demo"
    shutil.copytree(base.root, folder)
    shutil.copytree(base.root.parent / "_harness", tmp_path / "_harness")
    with open(folder / "workload.yaml", "a") as f:
        f.write("\npolicy:\n  allow: [fopen, fread, fclose, fputs, printf, fflush]\n")
    workload = dataclasses.replace(load_workload(str(folder)), warmup=1, iters=1)
    home = tmp_path / "home"
    home.mkdir()
    targets = [home / "pwned", folder / "pwned"]
    spy = SPY.format(pid=engine_with_key.pid, ppid=os.getpid(), targets=", ".join(f'"{t}"' for t in targets))
    seed = workload.seed_source
    source = seed.replace(RUN_HEAD, SPY_DECLS + RUN_HEAD + spy)
    blocks.validate_child(seed, source)

    async def main():
        ex = LocalExecutor(work_dir=tmp_path / "jobs")
        try:
            return await asyncio.wait_for(evaluate_source(workload, source, ex, job_prefix="spy", seed=5), 240)
        finally:
            await ex.close()

    out = asyncio.run(main())
    assert out.status == "incorrect", (out.status, out.reason)
    assert "cuco_run returned 7" in out.reason, out.reason
    text = out.feedback + "".join(s.log for s in out.stages)
    assert CANARY not in text and "stolen" not in text and "wrote" not in text
    for t in targets:
        assert not t.exists(), f"the candidate wrote {t}"


async def test_a_secret_a_job_prints_is_blanked_in_every_log_and_feedback(monkeypatch, tmp_path):
    """A key value that reaches a job's output anyway (here: the compiler quotes a source line that holds
    it) is blanked before the store, a reason or the LLM's feedback see it."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    workload = load_workload("demo")
    source = workload.seed_source.replace(RUN_HEAD, RUN_HEAD + f'  int leak = "{CANARY}" + ;\n')
    ex = LocalExecutor(work_dir=tmp_path / "jobs")
    try:
        out = await asyncio.wait_for(evaluate_source(workload, source, ex, job_prefix="leak", seed=5), 240)
    finally:
        await ex.close()
    assert out.status == "failed" and out.stages[0].stage == "build"
    assert "[REDACTED]" in out.stages[0].log
    assert CANARY not in out.stages[0].log + out.feedback + out.reason


def test_what_a_nodes_setup_exports_reaches_the_job_but_no_secret_named_one(tmp_path):
    """A node's `setup:` lines are its configuration for jobs (`module load`, NCCL_HOME, a venv): what they
    export passes the allow-list, except a name that says it is a secret."""
    work = tmp_path / "node"
    setup = ["export CUCO_SETUP_VAR=loaded", f"export HF_TOKEN={CANARY}"]
    script = run_script(str(work), "setup", [], ["sh", "-c", "env"], {}, setup, 30.0, 1.0, [])
    out = subprocess.run(["sh", "-c", script], capture_output=True, timeout=60, env={**os.environ})
    members = read_result(out.stdout)
    log = members["logtail"].decode()
    assert "CUCO_SETUP_VAR=loaded" in log, log
    assert CANARY not in log and "HF_TOKEN" not in log


@needs_gxx
def test_every_result_from_a_weaker_sandbox_says_so(tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("util-linux unshare is not on PATH")
    workload = dataclasses.replace(load_workload("demo"), warmup=1, iters=1)

    async def main():
        ex = LocalExecutor(
            work_dir=tmp_path / "jobs", extra_env={"PATH": fake_bwrap(tmp_path), "CUCO_SANDBOX": "unshare"}
        )
        try:
            return await asyncio.wait_for(
                evaluate_source(workload, workload.seed_source, ex, job_prefix="weak", seed=5, upto=VERIFY), 240
            )
        finally:
            await ex.close()

    out = asyncio.run(main())
    assert out.status == "verified", (out.status, out.reason)
    assert out.metrics is not None and out.metrics["sandbox"].startswith("unshare (weaker than bwrap"), out.metrics
