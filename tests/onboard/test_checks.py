"""Every init-made workload carries two candidates its verification must reject: checks/do_nothing.cu (run()
returns at once) and checks/skip_comm.cu (the region without its collectives). Here (no GPU) they are
what they claim to be and they build with the harness's own build (real nvcc, NCCL headers); on GPUs,
tests/onboard/gpu_onboard_2gpu.sh verifies that both are rejected on every rank."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cuco_tui.cli import main
from tests.onboard.toolchain import compiles_with_nccl

COMPILES = compiles_with_nccl("the checks' build is not tried here")

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).parent / "programs"
RUN_LOCAL = ROOT / "workloads" / "_harness" / "cuda" / "run_local.py"


def _init(tmp_path, capsys, name="mpi_allreduce") -> Path:
    out = tmp_path / name
    assert main(["init", str(PROGRAMS / f"{name}.cu"), "-o", str(out)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    return out


def _run_body(text: str) -> str:
    body = text.split("  int run() {", 1)[1]
    return body.split("\n  }\n", 1)[0]


def test_checks_are_the_seed_without_its_work(tmp_path, capsys):
    w = _init(tmp_path, capsys)
    seed, nothing, skip = ((w / f).read_text() for f in ("candidate.cu", "checks/do_nothing.cu", "checks/skip_comm.cu"))
    assert "ncclAllReduce(" in _run_body(seed) and "scale_kernel<<<" in _run_body(seed)
    assert "<<<" not in _run_body(nothing) and "nccl" not in _run_body(nothing).lower()
    assert "ncclAllReduce(" not in _run_body(skip) and "scale_kernel<<<" in _run_body(skip)
    # everything but run() is the seed's: the checks differ from it only where they claim to
    assert seed.split("  int run() {")[0] == nothing.split("  int run() {")[0] == skip.split("  int run() {")[0]


@COMPILES
def test_checks_build_with_the_harness(tmp_path, capsys):
    w = _init(tmp_path, capsys)

    def build(check: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                str(RUN_LOCAL),
                str(w),
                "--source",
                str(w / "checks" / check),
                "--build-only",
                "--build-dir",
                str(tmp_path / "build" / check),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )

    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(build, ["do_nothing.cu", "skip_comm.cu"]))
    for d in done:
        assert d.returncode == 0, d.stdout[-2000:] + d.stderr[-2000:]
