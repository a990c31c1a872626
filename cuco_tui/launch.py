"""Find a project home and a run, tell whether its engine lives, and spawn the engine daemon."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from engine.daemon import protocol
from engine.daemon.protocol import RunInfo
from engine.llm.keys import held_keys
from engine.store.store import DB_NAME, ReadStore

from .client import ping

SPAWN_TIMEOUT_S = 60.0
BUSY_ENGINE_S = 15.0  # a second, longer, hello to an engine whose process lives but did not answer at once
REPO_ROOT = Path(__file__).resolve().parent.parent


class RunNotFound(LookupError):
    pass


def resolve_home(home: str | Path | None) -> Path:
    if home:
        return Path(home).expanduser().resolve()
    if os.environ.get("CUCO_HOME"):
        return Path(os.environ["CUCO_HOME"]).expanduser().resolve()
    return (Path.cwd() / ".cuco").resolve()


def resolve_run(home: Path, run: str | None) -> str:
    """`run` itself if the store has it; if omitted: the only live run, else the newest run."""
    if not (home / DB_NAME).exists():
        raise RunNotFound(f"{home}: no cuco store here (start one with `cuco run WORKLOAD`, or pass --home)")
    store = ReadStore(home)
    try:
        runs = [r["id"] for r in store.runs()]
    finally:
        store.close()
    if run:
        if run in runs:
            return run
        matches = [r for r in runs if r.startswith(run)]
        if len(matches) == 1:
            return matches[0]
        raise RunNotFound(f"run {run!r} is not in {home} (runs: {', '.join(runs[-8:]) or 'none'})")
    live = [info.run_id for info in protocol.live_runs(home)]
    if len(live) == 1:
        return live[0]
    if not runs:
        raise RunNotFound(f"{home}: no runs yet (start one with `cuco run WORKLOAD`)")
    if len(live) > 1:
        raise RunNotFound(f"several runs are live ({', '.join(live)}): name one")
    return runs[-1]


async def live_engine(home: Path, run_id: str, timeout: float = 2.0) -> RunInfo | None:
    """run.json present, its pid alive, and its socket answering hello."""
    info = protocol.live_run_info(home, run_id)
    if info is None:
        return None
    hello = await ping(info.socket, timeout=timeout)
    if hello is None and protocol.pid_alive(info.pid):
        # its process lives: a busy engine on a loaded machine, most likely, not a dead one. Mistaken for
        # dead, a control would write the store beside it, or `resume` would start a second engine.
        hello = await ping(info.socket, timeout=BUSY_ENGINE_S)
    return info if hello is not None and hello.get("run") == run_id else None


def daemon_log_path(home: Path, run_id: str) -> Path:
    return protocol.run_dir(home, run_id) / "daemon.log"


def spawn_daemon(
    home: Path,
    run_id: str,
    *,
    create: bool = False,
    workload: Path | None = None,
    config_json: str | None = None,
    cluster: str | None = None,
) -> subprocess.Popen:
    """Start `python -m engine.daemon.daemon` in its own session, stdio to `<home>/runs/<run>/daemon.log`."""
    argv = [sys.executable, "-m", "engine.daemon.daemon", "--home", str(home), "--run", run_id]
    if create:
        argv += ["--create", "--workload", str(workload), "--config-json", config_json or "{}"]
        if cluster:
            argv += ["--cluster", str(cluster)]
    else:
        argv += ["--resume"]
    log_path = daemon_log_path(home, run_id)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **held_keys()}  # the engine is the one process that needs the keys
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env=env,
            cwd=os.getcwd(),
        )


def wait_for_daemon(home: Path, run_id: str, proc: subprocess.Popen, timeout: float = SPAWN_TIMEOUT_S) -> RunInfo:
    """Wait until the spawned daemon serves (run.json with its pid); explain a failure with its log."""
    info = protocol.wait_for_run_info(home, run_id, timeout, pid=proc.pid)
    if info is not None and asyncio.run(ping(info.socket, timeout=5.0)) is not None:
        return info
    rc = proc.poll()
    tail = ""
    try:
        tail = daemon_log_path(home, run_id).read_text(errors="replace")[-2000:]
    except OSError:
        pass
    why = f"exited with {rc}" if rc is not None else f"did not serve within {timeout:.0f} s"
    raise RuntimeError(f"the engine for run {run_id} {why}; its log ({daemon_log_path(home, run_id)}):\n{tail}")


def config_json(config) -> str:
    return config.to_json() if hasattr(config, "to_json") else json.dumps(config)
