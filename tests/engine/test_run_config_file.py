"""`cuco run --config FILE` and `--set KEY=VALUE`: every run setting from a YAML file, flags winning over
`--set`, `--set` over the file; a bad file is refused (exit 2) with a message naming the file and the field,
and starts nothing."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def cuco(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CUCO_HOME"}
    return subprocess.run(
        [sys.executable, "-m", "cuco_tui.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


BAD_FILES = [
    ("islands: two\n", "islands", "must be an integer"),
    ("max_evls: 80\n", "max_evls", "did you mean 'max_evals'"),
    ("meta_every: -1\n", "meta_every", "must be >= 0"),
    ("novelty_threshold: 1.5\n", "novelty_threshold", "(0, 1]"),
    ("embedding: anthropic:claude-haiku-4-5\n", "embedding", "openai"),
    ("llm: [1, 2]\n", "llm", "a list of strings"),
    ("parent_selection: best\n", "parent_selection", "power_law"),
    ("cluster: nodes.yaml\n", "cluster", "no such file"),
    ("islands: [2\n", "--config", "not valid YAML at line"),
    ("- islands\n", "--config", "must be a mapping"),
]


@pytest.mark.parametrize("text,field,fragment", BAD_FILES, ids=[f[1] + "-" + str(i) for i, f in enumerate(BAD_FILES)])
def test_bad_config_file_exits_2_naming_file_and_field(tmp_path: Path, text, field, fragment):
    conf = tmp_path / "search.yaml"
    conf.write_text(text)
    home = tmp_path / "home"
    proc = cuco("run", "demo", "--headless", "--config", str(conf), "--home", str(home), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{conf}: {field}:" in proc.stderr and fragment in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (home / "cuco.db").exists()  # bad input starts nothing


def test_missing_config_file_and_bad_set(tmp_path: Path):
    home = tmp_path / "home"
    proc = cuco("run", "demo", "--headless", "--config", "nope.yaml", "--home", str(home), cwd=tmp_path)
    assert proc.returncode == 2 and "nope.yaml: --config: cannot read it" in proc.stderr, proc.stderr
    proc = cuco("run", "demo", "--headless", "--set", "meta_every", "--home", str(home), cwd=tmp_path)
    assert proc.returncode == 2 and "--set" in proc.stderr and "KEY=VALUE" in proc.stderr, proc.stderr
    proc = cuco("run", "demo", "--headless", "--set", "islands=many", "--home", str(home), cwd=tmp_path)
    assert proc.returncode == 2 and "--set: islands: cannot read 'many'" in proc.stderr, proc.stderr
    assert not (home / "cuco.db").exists()


@pytest.mark.slow
def test_config_file_set_and_flags_reach_the_stored_run(tmp_path: Path):
    conf = tmp_path / "search.yaml"
    conf.write_text(
        "# a search setup kept beside the workload\n"
        "max-evals: 50\nislands: 3\nseed: 1\nmeta_every: 4\nnovelty_threshold: 0.95\n"
        "explore_fraction: 0.25\n"
    )
    home = tmp_path / "home"
    proc = cuco(
        "run",
        "demo",
        "--headless",
        "--config",
        str(conf),
        "--set",
        "seed=7",
        "--set",
        "islands=1",
        "--max-evals",
        "3",
        "--home",
        str(home),
        "--name",
        "cfg",
        cwd=tmp_path,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(cuco("report", "cfg", "--json", "--home", str(home), cwd=tmp_path).stdout)
    assert report["evaluated"] == 3  # the flag wins over the file's 50
    db = sqlite3.connect(f"file:{home / 'cuco.db'}?mode=ro", uri=True)
    stored = json.loads(db.execute("SELECT config_json FROM runs WHERE id='cfg'").fetchone()[0])
    db.close()
    assert stored["max_evals"] == 3 and stored["seed"] == 7 and stored["islands"] == 1  # --set over the file
    assert stored["meta_every"] == 4 and stored["novelty_threshold"] == 0.95 and stored["explore_fraction"] == 0.25
