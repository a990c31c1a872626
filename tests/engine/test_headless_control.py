"""A headless run is controlled from another terminal through its engine's socket: `cuco stop` there
reaches the engine (not the store beside it, which would make two writers) and the run ends stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def cuco(*args: str, home: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cuco_tui.cli", *args, "--home", str(home)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        **kw,
    )


@pytest.mark.timeout(400)
def test_cuco_stop_reaches_a_headless_engine(tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cuco_tui.cli",
            "run",
            "demo",
            "--headless",
            "--max-evals",
            "500",
            "--name",
            "hl",
            "--home",
            str(home),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:  # the run has evaluated something: it is well under way
            report = cuco("report", "hl", "--json", home=home, env=env)
            if report.returncode in (0, 1) and report.stdout.strip() and json.loads(report.stdout)["evaluated"] >= 2:
                break
            assert run.poll() is None, run.communicate()
            time.sleep(1)
        else:
            pytest.fail("the headless run evaluated nothing in 240 s")
        stop = cuco("stop", "hl", home=home, env=env)
        assert stop.returncode == 0, stop.stderr
        assert "engine" in stop.stdout and "no live engine" not in stop.stdout
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, err
    assert "Traceback" not in err and "IntegrityError" not in err
    report = json.loads(cuco("report", "hl", "--json", home=home, env=env).stdout)
    assert report["state"] == "stopped"
    assert report["evaluated"] < 500
