"""Keys never reach the store, the blobs, a log, a prompt, an exception message or a job's environment."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from fake_llm import FakeLLMServer, Reply
from llm_helpers import OPENAI_SECRET, SECRET, context, demo_workload, knob_diff, open_store, view

from engine.evaluation.evaluation import build_job, run_job
from engine.llm.errors import LLMError
from engine.search.mutators.llm import LLMSettings, build_llm_mutator
from remote.jobs import JobSpec

ROOT = Path(__file__).resolve().parents[2]


def _files_hold(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


async def test_keys_never_stored_or_logged(llm_env, tmp_path, caplog):
    w = demo_workload()
    caplog.set_level(logging.DEBUG)
    echo = {"type": "error", "error": {"type": "authentication_error", "message": f"bad key {SECRET}"}}
    script = [
        Reply(status=401, body=echo),  # error echoing the key
        Reply(f"I saw your key {SECRET} and {OPENAI_SECRET}\n" + knob_diff()),
    ]  # answer echoing it
    with FakeLLMServer(script) as srv:
        llm_env.setenv("ANTHROPIC_BASE_URL", srv.url)
        home = tmp_path / "home"
        store = await open_store(home)
        m = build_llm_mutator(["anthropic:claude-haiku-4-5"], None, w, home=home, settings=LLMSettings(meta_every=0))
        assert await m.propose(context(store, w, view(w.seed_source))) is None  # 401: no retry, no proposal
        p = await m.propose(context(store, w, view(w.seed_source)))
        assert p is not None and SECRET not in p.note and SECRET not in p.source
        assert (
            srv.requests[0].headers.get("x-api-key", srv.requests[0].headers.get("authorization", "")).endswith(SECRET)
        )
        for req in srv.requests:  # the key went as a header, never in a prompt
            assert SECRET not in req.prompt_text
        await m.close()
        await store.close()
    rows_with_error = [r for r in caplog.records if "401" in r.getMessage() or "bad key" in r.getMessage()]
    assert rows_with_error, "the failure should have been logged"
    for secret in (SECRET, OPENAI_SECRET):
        assert secret not in caplog.text
        assert _files_hold(home, secret.encode()) == []  # cuco.db, its WAL, every blob


def test_llm_error_never_carries_a_key(llm_env):
    err = LLMError(f"upstream said {SECRET}", kind="client", retryable=False, status=401)
    assert SECRET not in str(err) and SECRET not in repr(err) and SECRET not in " ".join(map(str, err.args))


def test_job_specs_carry_only_the_workload_env(llm_env):
    w = demo_workload()
    specs: list[JobSpec] = [
        build_job(w, w.seed_source, "j-build"),
        run_job(w, b"bin", "verify", 1, "j-verify"),
        run_job(w, b"bin", "benchmark", 2, "j-bench"),
    ]
    for spec in specs:
        assert dict(spec.env) == {k: v for k, v in spec.env.items() if k in w.launch_env}
        assert not any(k.endswith("_API_KEY") for k in spec.env)
        assert SECRET not in repr(spec)


def test_engine_and_remote_code_never_name_key_variables():
    """Only engine/llm reads key variables; nothing else may copy them anywhere (a job env included)."""
    offenders = []
    for folder in ("engine", "remote"):
        for path in (ROOT / folder).rglob("*.py"):
            if "llm" in path.relative_to(ROOT).parts[:2]:
                continue
            text = path.read_text()
            if "_API_KEY" in text or "COMPAT_KEY" in text:
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


async def test_local_job_environment_has_no_keys(llm_env, tmp_path):
    from remote.local import LocalExecutor

    executor = LocalExecutor(work_dir=tmp_path / "jobs", cpu_slots=1, gpus=[])
    await executor.start()
    try:
        result = await executor.run(
            JobSpec("env", [sys.executable, "-c", "import os; print(dict(os.environ))"], timeout_s=30)
        )
    finally:
        await executor.close()
    assert result.ok
    assert SECRET not in result.log and OPENAI_SECRET not in result.log


def test_held_keys_live_only_in_the_engines_memory(tmp_path):
    """`cuco` and the engine daemon hold their keys: no child inherits one, /proc/PID/environ (what another
    process of the user could read) no longer shows it, and the clients still get it."""
    import subprocess

    probe = (
        "import os, subprocess, sys\n"
        "from engine.llm.keys import hold_keys, env_key\n"
        "held = hold_keys()\n"
        "child = subprocess.run(['sh', '-c', 'env'], capture_output=True, text=True).stdout\n"
        "environ = open('/proc/self/environ', 'rb').read().decode(errors='replace')\n"
        "print(held, env_key('ANTHROPIC_API_KEY') == sys.argv[1], sys.argv[1] in child, sys.argv[1] in environ)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, SECRET],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "ANTHROPIC_API_KEY": SECRET},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['ANTHROPIC_API_KEY']", "True", "False", "False"], out.stdout
