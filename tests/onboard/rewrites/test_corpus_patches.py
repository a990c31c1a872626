"""Every rewrite offered on a corpus program, as a patch against the program's own files: it applies with
`patch -p1` to an unmodified copy and the patched files compile with the real nvcc (MPI's compiler driver
as host compiler, NCCL's headers), all offered ones together (the facts are read again after each, so
each meets the others' code). NVIDIA's Jacobi with all of them is built by its own Makefile in
test_rewrites.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from engine.onboard.analyze import analyze_files
from engine.onboard.patch import unified_diff
from engine.onboard.preprocess import Flags
from engine.onboard.rewrites import REGISTRY, Offer, check_all, facts_from_analysis, rewrite_program

from ..corpus import CORPUS, PROGRAMS
from ..toolchain import compiles_with_nccl

# the corpus programs with a kernel and a region the rewrites read (nccl_graphs replays graphs: none offered)
NAMES = ["nvidia_jacobi_nccl_overlap", "cuco_moe_seed", "async_ring_allreduce_single"]
EXPECTED = {
    "nvidia_jacobi_nccl_overlap": ["nccl_register", "comm_config", "lsa_sendrecv"],
    "cuco_moe_seed": ["comm_config", "lsa_collective"],
    "async_ring_allreduce_single": ["comm_config", "keep_scratch"],
}


def _offered(name: str):
    files, flags, _ = PROGRAMS[name]
    paths = [CORPUS / f for f in files]
    if not paths[0].is_file():
        pytest.skip(f"the corpus is not at {CORPUS}")
    facts = facts_from_analysis(
        analyze_files([str(p) for p in paths], Flags(defines=tuple(f[2:] for f in flags if f.startswith("-D"))))
    )
    return paths, facts, [v.rewrite for v in check_all(facts) if isinstance(v, Offer)]


@pytest.mark.parametrize("name", NAMES)
def test_the_offered_rewrites_are_the_ones_the_program_shows(name):
    _, _, offered = _offered(name)
    assert offered == EXPECTED[name]


@compiles_with_nccl("the patched programs are compiled where it is")
@pytest.mark.parametrize("name", NAMES)
def test_the_offered_rewrites_patch_the_original_files_and_compile(tmp_path, name):
    import nvidia.nccl

    if shutil.which("mpicxx") is None:
        pytest.skip("mpicxx is not on PATH: the programs include mpi.h")
    paths, facts, offered = _offered(name)
    texts, notes = rewrite_program(facts, offered, {"comm_ctas": "8"})
    assert [n.split(":")[0] for n in notes] == [r.name for r in REGISTRY if r.name in offered]
    dest = tmp_path / "copy"
    shutil.copytree(paths[0].parent, dest)
    dest.chmod(0o755)
    for f in dest.iterdir():
        f.chmod(0o644)
    r = subprocess.run(
        ["patch", "-p1"], input=unified_diff(facts.texts, texts), text=True, cwd=dest, capture_output=True, timeout=30
    )
    assert r.returncode == 0, r.stdout + r.stderr
    include = Path(list(nvidia.nccl.__path__)[0]) / "include"
    _, flags, _ = PROGRAMS[name]
    for p in paths:
        r = subprocess.run(
            [
                "nvcc",
                "-ccbin",
                "mpicxx",
                "-std=c++17",
                "-arch=sm_90",
                f"-I{include}",
                *flags,
                "-x",
                "cu",
                "-c",
                p.name,
                "-o",
                p.stem + ".o",
            ],
            cwd=dest,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, f"{p.name}: {r.stderr[-2000:]}"
