"""`cuco run demo --cluster cluster.yaml`: the engine builds, verifies and benchmarks every candidate on
two real sshd nodes (no local job), and the store records which node ran what."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

from tests.engine.test_workload_errors import edit_yaml

CLI = [sys.executable, "-m", "cuco_tui.cli"]


def test_demo_runs_on_ssh_nodes(nodes):
    cluster = nodes.cluster_yaml()
    home = nodes.home
    run = subprocess.run(
        CLI
        + [
            "--home",
            str(home),
            "run",
            "demo",
            "--headless",
            "--cluster",
            str(cluster),
            "--max-evals",
            "4",
            "--name",
            "remote",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(
        subprocess.run(
            CLI + ["--home", str(home), "report", "remote", "--json"], capture_output=True, text=True, timeout=60
        ).stdout
    )
    assert report["evaluated"] == 4 and report["correct"] >= 1, report
    assert report["best"]["speedup"] > 0
    conn = sqlite3.connect(home / "cuco.db")
    used = {n for (n,) in conn.execute("SELECT DISTINCT node FROM evaluations")}
    conn.close()
    assert used and used <= set(nodes.sshds), used  # every job ran on a node of the cluster
    assert not (home / "jobs").exists()  # and none on this machine


def test_unknown_host_key_stops_the_run_with_the_trust_hint(nodes):
    (nodes.home / "known_hosts").write_text("")  # the fixture trusts both nodes: trust nothing
    cluster = nodes.cluster_yaml()
    run = subprocess.run(
        CLI + ["--home", str(nodes.home), "run", "demo", "--headless", "--cluster", str(cluster), "--max-evals", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode != 0
    assert "cuco nodes trust" in run.stderr


def test_a_workload_needing_more_gpus_than_any_node_has_is_refused_before_any_job(nodes, demo_copy):
    edit_yaml(demo_copy, lambda d: d["launch"].update(gpus=2))
    first = sorted(nodes.sshds)[0]
    cluster = nodes.cluster_yaml(node_extra={first: {"gpus": [0]}})  # one node with 1 GPU, the other none
    run = subprocess.run(
        CLI
        + [
            "--home",
            str(nodes.home),
            "run",
            str(demo_copy),
            "--headless",
            "--cluster",
            str(cluster),
            "--max-evals",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1, run.stderr[-3000:]
    assert "demo needs 2 GPUs" in run.stderr and f"the most any usable node of {cluster} has is 1" in run.stderr
    assert "Traceback" not in run.stderr
    listing = subprocess.run(CLI + ["--home", str(nodes.home), "ls"], capture_output=True, text=True, timeout=60)
    assert "no runs" in listing.stdout
    for name in nodes.sshds:  # no job reached a node
        jobs = nodes.work_dir(name) / "jobs"
        assert not jobs.exists() or not any(jobs.iterdir())
