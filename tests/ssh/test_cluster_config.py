"""cluster.yaml validation: every error names the file and the field (no sshd needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote.cluster import load_cluster
from remote.errors import InputError
from remote.registry import executor_from_file


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "cluster.yaml"
    p.write_text(text)
    return p


GOOD = """
ssh_config: ./ssh_config
defaults: {user: alice, work_dir: ~/cuco, setup: ["module load cuda"]}
quarantine: {failures: 2, window_s: 30, duration_s: 0}
nodes:
  - {name: gpu1, host: gpu1.example.org, port: 2222, gpus: auto, identity_file: ~/.ssh/id_ed25519}
  - {name: gpu2, host: gpu2, gpus: [0, 1, 2, 3], cpu_slots: 16, proxy_jump: bastion, work_dir: /scratch/a}
"""


def test_good_file(tmp_path):
    c = load_cluster(write(tmp_path, GOOD))
    a, b = c.nodes
    assert (a.port, a.gpus, a.user, a.work_dir, a.setup) == (2222, None, "alice", "~/cuco", ("module load cuda",))
    assert (b.port, b.gpus, b.cpu_slots, b.proxy_jump, b.work_dir) == (None, (0, 1, 2, 3), 16, "bastion", "/scratch/a")
    assert c.ssh_config == tmp_path / "ssh_config"
    assert (c.quarantine.failures, c.quarantine.window_s, c.quarantine.duration_s) == (2, 30.0, 0.0)
    ex = executor_from_file(tmp_path / "cluster.yaml", tmp_path / ".cuco")
    assert [n.name for n in ex.nodes()] == ["gpu1", "gpu2"] and ex.max_gpus_per_job == 0


@pytest.mark.parametrize(
    "text, field, words",
    [
        ("nodes:\n  - {name: a, host: h}\n  - {name: b, host: h, port: 70000}\n", "nodes[1].port", "integer 1-65535"),
        ("nodes:\n  - {name: a, port: ssh}\n", "nodes[0].port", "integer 1-65535"),
        ("nodes: []\n", "nodes", "non-empty list"),
        ("{}\n", "nodes", "required"),
        ("nodes:\n  - {host: h}\n", "nodes[0].name", "required"),
        ("nodes:\n  - {name: a, gpus: [0, 0]}\n", "nodes[0].gpus", "twice"),
        ("nodes:\n  - {name: a, gpus: all}\n", "nodes[0].gpus", "'auto' or a list"),
        ("nodes:\n  - {name: a, cpu_slots: 0}\n", "nodes[0].cpu_slots", ">= 1"),
        ("nodes:\n  - {name: a}\n  - {name: a}\n", "nodes[1].name", "already used by nodes[0]"),
        ("nodes:\n  - {name: a, hots: x}\n", "nodes[0].hots", "unknown field"),
        ("nodes:\n  - {name: a, work_dir: relative/dir}\n", "nodes[0].work_dir", "absolute path"),
        ("nodes:\n  - {name: a}\nquarantine: {failures: 0}\n", "quarantine.failures", ">= 1"),
        ("nodes:\n  - {name: 'a b'}\n", "nodes[0].name", "letters"),
        ("nodes: [\n", "line 2", "not valid YAML"),
    ],
)
def test_bad_files_name_file_and_field(tmp_path, text, field, words):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_cluster(path)
    e = err.value
    assert (e.file, e.field) == (str(path), field), str(e)
    assert words in e.message and str(e) == f"{path}: {field}: {e.message}"


def test_missing_file(tmp_path):
    with pytest.raises(InputError) as err:
        load_cluster(tmp_path / "nope.yaml")
    assert "cannot read" in str(err.value)


def test_cli_bad_input_exit_2(tmp_path, capsys):
    import argparse

    from cuco_tui.verbs import nodes as nodes_verb

    path = write(tmp_path, "nodes:\n  - {name: a, host: h}\n  - {name: b, host: h, port: 70000}\n")
    parser = argparse.ArgumentParser(prog="cuco")
    nodes_verb.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["nodes", "check", str(path), "--home", str(tmp_path)])
    assert args.func(args) == 2
    assert capsys.readouterr().err.strip() == f"{path}: nodes[1].port: must be an integer 1-65535 (got 70000)"
    args = parser.parse_args(["nodes", "trust", "zz", "--cluster", str(write(tmp_path, GOOD)), "--yes"])
    assert args.func(args) == 2
    assert "no node named 'zz'" in capsys.readouterr().err


def test_remote_never_imports_ui():
    import ast

    root = Path(__file__).resolve().parents[2] / "remote"
    for f in root.glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for n in names:
                assert n.split(".")[0] not in ("textual", "engine", "cuco_tui", "rich"), f"{f.name} imports {n}"
