"""A GPU job dispatched through the SSH executor to an in-process asyncssh server (the GPU machine has no
sshd): 2 GPUs leased, CUDA_VISIBLE_DEVICES checked, nvidia-smi queried on exactly those GPUs.

Skipped (with the reason) without nvidia-smi or with fewer than 2 GPUs. Run on the GPU machine:

    pytest -m gpu tests/gpu/test_ssh_gpu_e2e.py -v
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import shutil
import signal
import tempfile
from pathlib import Path

import asyncssh
import pytest
import yaml

from remote.cluster import load_cluster
from remote.gpus import detect_local_gpus
from remote.jobs import JobSpec, JobStatus
from remote.ssh_executor import SSHExecutor

pytestmark = pytest.mark.gpu


def _gpu_skip_reason() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi not found: no NVIDIA GPU here"
    if len(detect_local_gpus()) < 2:
        return "needs at least 2 GPUs (nvidia-smi lists fewer)"
    return None


class _Session:
    """Runs each exec request as `sh -c COMMAND` in its own process group, piping stdin/out/err."""

    def __init__(self, groups: set[int]):
        self.groups = groups

    async def __call__(self, process: asyncssh.SSHServerProcess) -> None:
        proc = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            process.command or "true",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        self.groups.add(proc.pid)
        try:
            await process.redirect(stdin=proc.stdin, stdout=proc.stdout, stderr=proc.stderr)
            rc = await proc.wait()
            process.exit(rc)
        except (asyncssh.Error, ConnectionError):
            pass
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


@contextlib.asynccontextmanager
async def asyncssh_node(gpus="auto"):
    """An in-process asyncssh server on 127.0.0.1 (port 0) and a cluster.yaml pointing at it."""
    base = Path(tempfile.mkdtemp(prefix="cuco-asyncssh-"))
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key.write_private_key(str(base / "client_key"))
    os.chmod(base / "client_key", 0o600)
    groups: set[int] = set()
    server = await asyncssh.listen(
        "127.0.0.1",
        0,
        server_host_keys=[host_key],
        authorized_client_keys=asyncssh.import_authorized_keys(client_key.export_public_key().decode()),
        process_factory=_Session(groups),
        encoding=None,
    )
    port = server.sockets[0].getsockname()[1]
    home = base / "home"
    home.mkdir()
    (home / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key.export_public_key().decode()}")
    (base / "ssh_config").write_text("")
    doc = {
        "ssh_config": str(base / "ssh_config"),
        "connect_timeout_s": 10,
        "kill_grace_s": 0.5,
        "nodes": [
            {
                "name": "gpu-local",
                "host": "127.0.0.1",
                "port": port,
                "user": getpass.getuser(),
                "identity_file": str(base / "client_key"),
                "gpus": gpus,
                "work_dir": str(base / "work"),
            }
        ],
    }
    (base / "cluster.yaml").write_text(yaml.safe_dump(doc))
    try:
        yield base / "cluster.yaml", home
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)
        for g in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(g, signal.SIGKILL)
        shutil.rmtree(base, ignore_errors=True)


async def test_gpu_job_over_ssh_leases_two_gpus():
    reason = _gpu_skip_reason()
    if reason:
        print(f"skipped: {reason}")
        pytest.skip(reason)
    async with asyncssh_node() as (cluster_yaml, home):
        ex = SSHExecutor(load_cluster(cluster_yaml), home, user_known_hosts=[])
        await ex.start()
        try:
            assert ex.max_gpus_per_job == len(detect_local_gpus())
            # `nvidia-smi -L` takes no -i on every driver (580 refuses it): query each leased GPU by index
            cmd = (
                'echo "CVD=$CUDA_VISIBLE_DEVICES"; for g in $(echo "$CUDA_VISIBLE_DEVICES" | tr , " "); do '
                'nvidia-smi --query-gpu=index,name --format=csv,noheader -i "$g" || exit 1; done'
            )
            specs = [JobSpec(f"gpu-e2e-{i}", ["sh", "-c", cmd], gpus=2, timeout_s=60) for i in range(2)]
            results = await asyncio.gather(*(ex.run(s) for s in specs))
            for r in results:
                assert r.ok, (r.status, r.rc, r.log, r.error)
                assert len(r.gpus) == 2 and r.node == "gpu-local"
                lines = r.log.strip().splitlines()
                assert lines[0] == "CVD=" + ",".join(map(str, r.gpus))
                assert [int(ln.split(",")[0]) for ln in lines[1:]] == list(r.gpus), r.log
            hung = await ex.run(JobSpec("gpu-e2e-hung", ["sleep", "60"], gpus=2, timeout_s=1))
            assert hung.status is JobStatus.TIMEOUT
            state = ex.nodes()[0]
            assert state.gpus_busy == 0 and state.running_jobs == 0 and state.healthy
        finally:
            await ex.close()
