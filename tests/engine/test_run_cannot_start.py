"""A run that cannot do its job says so and exits 1: a workload whose jobs need more GPUs than the
executor has is refused before anything is built (no run left behind), and a run whose seed fails ends
`failed` with the seed's reason, not `finished`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.test_workload_errors import edit_yaml

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the demo workload")

CLI = [sys.executable, "-m", "cuco_tui.cli"]


def gpu_listing(tmp_path: Path, indices: list[int]) -> dict[str, str]:
    """An environment whose nvidia-smi answers the index query with `indices` (the machine's GPUs as the
    local executor discovers them), so that the test means the same on a machine with GPUs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + "".join(f"echo {i}\n" for i in indices))
    smi.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def cuco(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        CLI + ["--home", str(home), *args], capture_output=True, text=True, timeout=300, env=env or dict(os.environ)
    )


@pytest.mark.parametrize("gpus, says", [([], "this machine has none"), ([0], "this machine has 1")])
def test_too_few_gpus_is_refused_before_any_build(demo_copy: Path, tmp_path: Path, gpus, says):
    edit_yaml(demo_copy, lambda d: d["launch"].update(gpus=2))
    home = tmp_path / "home"
    env = gpu_listing(tmp_path, gpus)
    for headless in (["--headless"], []):  # in the foreground, and through the engine daemon
        proc = cuco(home, "run", str(demo_copy), *headless, "--max-evals", "2", env=env)
        assert proc.returncode == 1, proc.stderr
        assert "demo needs 2 GPUs" in proc.stderr and says in proc.stderr, proc.stderr
        assert "--cluster FILE" in proc.stderr  # what to do about it
        assert "Traceback" not in proc.stderr
    assert "no runs" in cuco(home, "ls").stdout
    jobs = home / "jobs"
    assert not jobs.exists() or not any(jobs.iterdir())  # nothing was built


def test_a_run_whose_seed_fails_ends_failed_with_the_reason(demo_copy: Path, tmp_path: Path):
    cand = demo_copy / "candidate.cpp"
    text = cand.read_text()
    start = text.index("// EVOLVE-BLOCK-START")
    line_end = text.index("\n", start) + 1
    cand.write_text(text[:line_end] + "this is not C++;\n" + text[line_end:])
    home = tmp_path / "home"
    proc = cuco(home, "run", str(demo_copy), "--headless", "--max-evals", "3", "--name", "broken")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(cuco(home, "report", "broken", "--json").stdout)
    assert report["state"] == "failed" and report["correct"] == 0 and report["evaluated"] == 1
    # the end-of-run summary is on stdout with the progress lines (a pipe, not a terminal), on a line of its own
    assert "the seed failed" in proc.stdout and "build" in proc.stdout.lower()
    assert any(line.startswith("run ") for line in proc.stdout.splitlines()), proc.stdout
