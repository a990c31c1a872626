"""The frozen-objects job: every frozen source of a workload compiled at once (the first build of a run waits for
the slowest, not for the sum), every object there when all compile, and the job failed, after every compile has
ended, when one does not. The demo's four frozen sources, compiled by the real g++ with the demo's flags, the
job's script run by `sh` in a directory of its own as an executor runs it."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from engine.evaluation.evaluation import _object_name, frozen_objects_job
from engine.workload import load_workload

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the sources are compiled")


def _run(job, where: Path) -> subprocess.CompletedProcess:
    for rel, data in job.files.items():
        dest = where / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    return subprocess.run(job.argv, cwd=where, capture_output=True, text=True, timeout=600)


def test_every_frozen_object_is_built(tmp_path):
    workload = load_workload("demo")
    job = frozen_objects_job(workload, "frozen-ok")
    proc = _run(job, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in workload.harness_sources:
        assert (tmp_path / _object_name(name)).stat().st_size > 0, name


def test_one_broken_source_fails_the_job_after_the_others_end(tmp_path):
    workload = load_workload("demo")
    broken = workload.harness_sources[0]
    files = dict(workload.harness_files)
    files[broken] = files[broken] + b"\nthis is not C++;\n"
    job = frozen_objects_job(dataclasses.replace(workload, harness_files=files), "frozen-broken")
    proc = _run(job, tmp_path)
    assert proc.returncode != 0
    assert broken in proc.stderr  # the compiler's message names the file
    # the job's shell waited for every compile: the other objects are complete, none cut off
    for name in workload.harness_sources[1:]:
        assert (tmp_path / _object_name(name)).stat().st_size > 0, name
