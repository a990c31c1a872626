"""Fixtures shared by the tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def demo_copy(tmp_path: Path) -> Path:
    """workloads/demo and the shared harness copied side by side (the yaml points at ../_harness), to be
    broken or changed by a test."""
    shutil.copytree(REPO / "workloads" / "demo", tmp_path / "demo")
    shutil.copytree(REPO / "workloads" / "_harness", tmp_path / "_harness")
    return tmp_path / "demo"
