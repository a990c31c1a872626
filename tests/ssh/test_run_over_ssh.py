"""`cuco run demo --cluster cluster.yaml`: the engine builds, verifies and benchmarks every candidate on
two real sshd nodes (no local job), and the store records which node ran what."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

CLI = [sys.executable, "-m", "cuco_tui.cli"]


def test_demo_runs_on_ssh_nodes(nodes):
    cluster = nodes.cluster_yaml()
    home = nodes.home
    run = subprocess.run(CLI + ["--home", str(home), "run", "demo", "--headless", "--cluster", str(cluster),
                                "--max-evals", "4", "--name", "remote"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(subprocess.run(CLI + ["--home", str(home), "report", "remote", "--json"],
                                       capture_output=True, text=True, timeout=60).stdout)
    assert report["evaluated"] == 4 and report["correct"] >= 1, report
    assert report["best"]["speedup"] > 0
    conn = sqlite3.connect(home / "cuco.db")
    used = {n for (n,) in conn.execute("SELECT DISTINCT node FROM evaluations")}
    conn.close()
    assert used and used <= set(nodes.sshds), used            # every job ran on a node of the cluster
    assert not (home / "jobs").exists()                        # and none on this machine


def test_unknown_host_key_stops_the_run_with_the_trust_hint(nodes):
    (nodes.home / "known_hosts").write_text("")   # the fixture trusts both nodes: trust nothing
    cluster = nodes.cluster_yaml()
    run = subprocess.run(CLI + ["--home", str(nodes.home), "run", "demo", "--headless", "--cluster", str(cluster),
                                "--max-evals", "2"], capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "cuco nodes trust" in run.stderr
