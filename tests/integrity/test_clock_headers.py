"""Every shipped workload builds its harness with the out-of-reach clock (cuco_clock.h). A harness built
without it falls back to a library clock that only the symbol policy protects, so a workload that forgets
the header must fail here, not pass quietly."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.workload import load_workload

WORKLOADS = sorted(p.parent.name for p in (Path(__file__).resolve().parents[2] / "workloads").glob("*/workload.yaml"))


@pytest.mark.parametrize("name", WORKLOADS)
def test_shipped_workload_builds_with_the_harness_clock(name):
    assert "cuco_clock.h" in load_workload(name).harness_files, (
        f"workloads/{name}/workload.yaml: harness.headers lacks ../_harness/cuco_clock.h"
    )
