"""The login node reached over SSH (the real sshd of tests/ssh, through the executor's connection pool and
host-key rules): `cuco run demo` submits, polls and collects as the login user."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

CLI = [sys.executable, "-m", "cuco_tui.cli"]
pytestmark = pytest.mark.slow


def _sshd_fixtures():
    """tests/ssh/conftest.py's real-sshd helpers (loaded by path: that folder is not a package)."""
    path = Path(__file__).resolve().parents[1] / "ssh" / "conftest.py"
    spec = importlib.util.spec_from_file_location("cuco_sshd_fixtures", path)
    module = sys.modules.get(spec.name)
    if module is None:
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look it up
        spec.loader.exec_module(module)
    return module


@pytest.fixture
def login_node(slurm):
    sshd = _sshd_fixtures()
    reason = sshd.skip_reason()
    if reason:
        pytest.skip(f"SSH login tests skipped: {reason}")
    user = sshd.ensure_user()
    slurm.associate(user.pw_name)  # with accounting, a user Slurm has no association for cannot submit
    with sshd.make_nodes(user, names=("login",)) as nodes:
        d = nodes.sshds["login"]
        d.kill()  # again, with the test cluster's slurm.conf in the login sessions' environment
        with open(d.dir / "sshd_config", "a") as f:
            f.write(f"SetEnv SLURM_CONF={slurm.conf}\n")
        d.start()
        yield nodes


def test_demo_runs_through_slurm_with_the_login_node_over_ssh(login_node, slurm):
    nodes = login_node
    d = nodes.sshds["login"]
    doc = {
        "kind": "slurm",
        "ssh_config": str(nodes.ssh_config),
        "known_hosts": str(nodes.home / "known_hosts"),
        "login": {"host": "127.0.0.1", "port": d.port, "user": "cucotest", "identity_file": str(nodes.client_key)},
        "work_dir": str(nodes.work_dir("login")),
        "partition": "gpu",
        "build": {"partition": "cpu"},
        "poll": {"min_s": 0.2, "max_s": 1.0},
        "connect_timeout_s": 5,
    }
    path = nodes.base / "slurm-ssh.yaml"
    path.write_text(yaml.safe_dump(doc))
    check = subprocess.run(
        CLI + ["--home", str(nodes.home), "nodes", "check", str(path)], capture_output=True, text=True, timeout=180
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "login 127.0.0.1" in check.stdout and "shared with the compute nodes │ yes" in " ".join(check.stdout.split())
    out = subprocess.run(
        CLI
        + [
            "--home",
            str(nodes.home),
            "run",
            "demo",
            "--headless",
            "--cluster",
            str(path),
            "--max-evals",
            "6",
            "--name",
            "ov",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rep = json.loads(
        subprocess.run(
            CLI + ["--home", str(nodes.home), "report", "ov", "--json"], capture_output=True, text=True, timeout=60
        ).stdout
    )
    assert rep["evaluated"] == 6 and rep["failed"] == 0, rep
    finished = [j for j in slurm.finished_jobs() if j.get("Name", "").startswith("cuco.ov-")]
    assert finished and all(j["UserId"].startswith("cucotest(") for j in finished)  # submitted as the login user
    assert not (nodes.home / "jobs").exists()


def test_the_login_node_is_trusted_with_nodes_trust(login_node):
    nodes = login_node
    d = nodes.sshds["login"]
    (nodes.home / "known_hosts").write_text("")  # the fixture trusts it: trust nothing
    doc = {
        "kind": "slurm",
        "ssh_config": str(nodes.ssh_config),
        "known_hosts": str(nodes.home / "known_hosts"),
        "login": {"host": "127.0.0.1", "port": d.port, "user": "cucotest", "identity_file": str(nodes.client_key)},
        "work_dir": str(nodes.work_dir("login")),
    }
    path = nodes.base / "slurm-ssh.yaml"
    path.write_text(yaml.safe_dump(doc))
    before = subprocess.run(
        CLI + ["--home", str(nodes.home), "nodes", "check", str(path)], capture_output=True, text=True, timeout=180
    )
    assert before.returncode == 1 and "cuco nodes trust" in before.stdout, before.stdout + before.stderr
    trust = subprocess.run(
        CLI + ["--home", str(nodes.home), "nodes", "trust", "login", "--cluster", str(path), "--yes"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert trust.returncode == 0 and "trusted" in trust.stdout, trust.stdout + trust.stderr
    after = subprocess.run(
        CLI + ["--home", str(nodes.home), "nodes", "check", str(path)], capture_output=True, text=True, timeout=180
    )
    assert after.returncode == 0, after.stdout + after.stderr
