"""An SSH node's sshd killed mid-job (with everything it started) and restarted a few seconds later: the job
is an environment fault, retried with backoff (or, while the only node is down, the run pauses itself and
`cuco resume` continues it); no candidate is failed for it, nothing is lost or evaluated twice."""

from __future__ import annotations

import json
import time

import pytest

from tests.chaos.chaos import check_invariants, cuco, finals, query, start
from tests.ssh.conftest import ensure_user, make_nodes, skip_reason

MAX_EVALS = 6


@pytest.mark.timeout(600)  # bounded: 1-2.5 min on a busy 2-core box
def test_sshd_killed_mid_job_then_restarted():
    reason = skip_reason()
    if reason:
        pytest.skip(f"SSH tests skipped: {reason}")
    with make_nodes(ensure_user(), names=("a",)) as nodes:  # one node: nowhere else to run the job
        home = nodes.home
        db = home / "cuco.db"
        cluster = nodes.cluster_yaml()
        proc = start(
            home, "run", "demo", "--headless", "--cluster", str(cluster), "--max-evals", str(MAX_EVALS), "--name", "ssh"
        )
        deadline = time.monotonic() + 300
        while not (finals(db, "ssh") >= 1 and query(db, "SELECT COUNT(*) FROM jobs WHERE state='running'")[0][0]):
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no job started on the node"
            time.sleep(0.05)
        nodes.sshds["a"].kill()  # the node's sshd, its sessions and the job they ran
        time.sleep(3)
        nodes.sshds["a"].start()  # back on the same port, same host key
        _, err = proc.communicate(timeout=600)
        if proc.returncode != 0:  # it paused itself while its only node was down
            assert proc.returncode == 1 and b"paused itself" in err, err.decode()[-3000:]
            resumed = cuco(home, "resume", "ssh", "--headless", timeout=600)
            assert resumed.returncode == 0, resumed.stderr[-3000:]
        check_invariants(home, "ssh", MAX_EVALS)
        faults = [json.loads(r) for (r,) in query(db, "SELECT result_json FROM evaluations WHERE fault='environment'")]
        assert faults, (
            "the lost job was not seen as the environment's fault: "
            + repr(query(db, "SELECT candidate_id, stage, status, fault, substr(result_json, 1, 300) FROM evaluations"))
            + repr(err.decode()[-1500:])
        )
        assert {f["fault"] for f in faults} <= {"node lost", "no usable node", "executor"}, faults
