"""An SSH node's sshd killed mid-job (with everything it started) and restarted a few seconds later: the job
is an environment fault (or its end reaches the engine after the restart), retried with backoff (or, while the only node is down, the run pauses itself and
`cuco resume` continues it); no candidate is failed for it, nothing is lost or evaluated twice."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.chaos.chaos import check_invariants, cuco, finals, query, start
from tests.ssh.conftest import ensure_user, make_nodes, skip_reason

MAX_EVALS = 6


def _kill_all_of(uid: int) -> None:
    """SIGKILL every process of `uid` (the node's only user here). A job's sandboxed processes need not be
    under the session the daemon's kill walks (a process whose parent died is adopted elsewhere)."""
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    os.kill(int(d), signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                pass


def _job_running_on(work_dir: Path) -> bool:
    """A job the node is running right now: started (its process group written) and not ended (no exit code
    yet). The store's `running` rows are written behind the engine's loop and may lag the node."""
    for job in (work_dir / "jobs").glob("*"):
        if (job / "pgid").is_file() and not (job / "rc").exists():
            try:
                os.killpg(int((job / "pgid").read_text().strip()), 0)
                return True
            except (ValueError, ProcessLookupError, PermissionError):
                continue
    return False


@pytest.mark.timeout(600)  # bounded: 1-2.5 min on a busy 2-core box
def test_sshd_killed_mid_job_then_restarted():
    reason = skip_reason()
    if reason:
        pytest.skip(f"SSH tests skipped: {reason}")
    user = ensure_user()
    with make_nodes(user, names=("a",)) as nodes:  # one node: nowhere else to run the job
        home = nodes.home
        db = home / "cuco.db"
        cluster = nodes.cluster_yaml()
        proc = start(
            home, "run", "demo", "--headless", "--cluster", str(cluster), "--max-evals", str(MAX_EVALS), "--name", "ssh"
        )
        deadline = time.monotonic() + 300
        while not (finals(db, "ssh") >= 1 and _job_running_on(nodes.work_dir("a"))):
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no job started on the node"
            time.sleep(0.05)
        nodes.sshds["a"].kill()  # the node's sshd, its sessions and the job they ran
        _kill_all_of(user.pw_uid)  # and whatever of the node's user outlived them: the whole node died
        time.sleep(3)
        nodes.sshds["a"].start()  # back on the same port, same host key
        _, err = proc.communicate(timeout=600)
        if proc.returncode != 0:  # it paused itself while its only node was down
            assert proc.returncode == 1 and b"paused itself" in err, err.decode()[-3000:]
            resumed = cuco(home, "resume", "ssh", "--headless", timeout=600)
            assert resumed.returncode == 0, resumed.stderr[-3000:]
        check_invariants(home, "ssh", MAX_EVALS)
        faults = [json.loads(r) for (r,) in query(db, "SELECT result_json FROM evaluations WHERE fault='environment'")]
        # No candidate is failed for the lost job: it is an environment fault (retried, or the run paused
        # itself) when the engine's next try meets the node down; when it meets the node back, the node's job
        # script (idempotent by job id) collects the job if it ended or starts it afresh, an ordinary result.
        blamed = query(
            db, "SELECT id, status, reason FROM candidates WHERE run_id='ssh' AND status IN ('failed', 'incorrect')"
        )
        assert not blamed, (blamed, err.decode()[-1500:])
        assert {f["fault"] for f in faults} <= {"node lost", "no usable node", "executor"}, faults
