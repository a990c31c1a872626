"""A search with the design-space mutator needs no LLM SDK: GPU nodes and minimal installs may have neither
anthropic nor openai, and `cuco run` must still search (the SDKs are imported only when a model is used)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the demo workload")

REPO = Path(__file__).resolve().parents[2]

BLOCK_SDKS = textwrap.dedent("""
    import sys
    class NoSdk:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("anthropic", "openai"):
                raise ModuleNotFoundError(f"No module named {name!r}")
    sys.meta_path.insert(0, NoSdk())
    from cuco_tui.cli import main
    code = main(sys.argv[1:])
    loaded = [m for m in sys.modules if m.split(".")[0] in ("anthropic", "openai")]
    assert not loaded, loaded
    sys.exit(code)
""")


def test_a_design_space_run_without_the_llm_sdks(tmp_path: Path):
    home = tmp_path / "home"
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            BLOCK_SDKS,
            "run",
            "demo",
            "--headless",
            "--max-evals",
            "3",
            "--home",
            str(home),
            "--name",
            "nosdk",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = subprocess.run(
        [sys.executable, "-m", "cuco_tui.cli", "report", "nosdk", "--json", "--home", str(home)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(report.stdout)["evaluated"] == 3
