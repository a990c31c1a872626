"""Names with one owner: the job files' names (the evaluation cascade's), the stages and their job
suffixes (engine/stages.py). Anywhere else they are imported, never written out: a second literal copy is
how the cascade got rebuilt by hand outside the engine. And the executors' optional features are declared
on the Executor protocol, so nothing probes an executor with hasattr/getattr."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "cuco_tui", "remote")

JOB_FILES = {"result.json", "spec.json", "cuco_candidate", "cuco_candidate.o", ".nonce"}
JOB_FILE_OWNER = "engine/evaluation/evaluation.py"
STAGE_OWNER = "engine/stages.py"
STAGE_NAMES = {"build", "verify", "benchmark"}
JOB_SUFFIXES = {"frozen", "benchmark2"}
LAUNCH_FRAGMENT = re.compile(r"\./cuco_candidate\b|--spec spec\.json|--result result\.json")
PROBE = re.compile(r"\b(hasattr|getattr)\([^)]*executor", re.I)


def _sources():
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            yield path.relative_to(REPO).as_posix(), path.read_text()


def _compared_names(tree: ast.AST):
    """(line, literal) for each `stage == "..."` / `mode != "..."` comparison with a string literal."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            left, right = node.left, node.comparators[0]
            name = left.id if isinstance(left, ast.Name) else left.attr if isinstance(left, ast.Attribute) else ""
            if name in ("stage", "mode") and isinstance(right, ast.Constant) and isinstance(right.value, str):
                yield node.lineno, right.value


def test_job_file_names_are_written_only_by_the_evaluation_cascade():
    bad = []
    for rel, text in _sources():
        if rel == JOB_FILE_OWNER:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value in JOB_FILES or LAUNCH_FRAGMENT.search(node.value):
                    bad.append(f"{rel}:{node.lineno}: {node.value[:60]!r}")
    assert not bad, f"import the name from {JOB_FILE_OWNER} instead:\n" + "\n".join(bad)


def test_stage_names_are_listed_and_compared_only_through_engine_stages():
    bad = []
    for rel, text in _sources():
        if rel == STAGE_OWNER:
            continue
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in JOB_SUFFIXES:
                bad.append(f"{rel}:{node.lineno}: job suffix {node.value!r}")
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                named = [e.value for e in node.elts if isinstance(e, ast.Constant)]
                if len(named) >= 2 and len(named) == len(node.elts) and set(named) <= STAGE_NAMES:
                    bad.append(f"{rel}:{node.lineno}: a list of stages {named}")
        bad += [
            f"{rel}:{line}: compared with {value!r}" for line, value in _compared_names(tree) if value in STAGE_NAMES
        ]
    assert not bad, f"use the names of {STAGE_OWNER}:\n" + "\n".join(bad)


def test_no_executor_is_probed_for_a_feature():
    bad = [
        f"{rel}:{i}: {line.strip()}"
        for rel, text in _sources()
        for i, line in enumerate(text.splitlines(), 1)
        if PROBE.search(line)
    ]
    assert not bad, "declare the feature on remote.jobs.Executor instead:\n" + "\n".join(bad)


def test_the_check_catches_what_it_is_for():
    """The checks above find the literals they forbid (so a pass means something)."""
    tree = ast.parse('stage == "verify"\nx = ("build", "verify")\nf = "result.json"\n')
    assert list(_compared_names(tree)) == [(1, "verify")]
    assert any(isinstance(n, ast.Tuple) and [e.value for e in n.elts] == ["build", "verify"] for n in ast.walk(tree))
    assert LAUNCH_FRAGMENT.search("./cuco_candidate --spec spec.json")
    assert PROBE.search('reconcile = getattr(engine.executor, "reconcile", None)')
