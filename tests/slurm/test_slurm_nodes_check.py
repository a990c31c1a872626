"""`cuco nodes check slurm.yaml` against the real test Slurm: partitions and GPUs from sinfo, the
stages' sbatch options accepted, the work dir shared with the compute node; a refused partition is
reported with the field, exit 1."""

from __future__ import annotations

import subprocess
import sys

CLI = [sys.executable, "-m", "cuco_tui.cli"]


def check(home, path) -> subprocess.CompletedProcess:
    return subprocess.run(
        CLI + ["--home", str(home), "nodes", "check", str(path)], capture_output=True, text=True, timeout=180, env=None
    )


def test_nodes_check_on_slurm_lists_partitions_gpus_and_a_shared_work_dir(slurm_yaml, tmp_path):
    out = check(tmp_path / ".cuco", slurm_yaml())
    assert out.returncode == 0, out.stdout + out.stderr
    text = " ".join(out.stdout.split())
    assert "gpu*: up, 1 nodes, gpu:4" in text and "cpu: up" in text
    assert "GPUs per node │ 4" in text
    assert "shared with the compute nodes │ yes" in text
    assert "run: --partition=gpu --gpus=1 accepted" in text and "build: --partition=cpu accepted" in text


def test_nodes_check_names_a_partition_slurm_refuses(slurm_yaml, tmp_path):
    path = slurm_yaml(run={"partition": "nosuch"})
    out = check(tmp_path / ".cuco", path)
    assert out.returncode == 1, out.stdout + out.stderr
    text = " ".join(out.stdout.split())
    assert f"run.partition in {path}" in text and "invalid partition" in text.lower()
