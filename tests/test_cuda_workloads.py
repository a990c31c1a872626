"""CPU-side checks of the CUDA workloads: specs, EVOLVE-BLOCKs, nvcc compiles, the harness's JSON writer.

nvcc and the nvidia-nccl-cu13==2.28.9 wheel are needed for the compile tests; without them those tests
are skipped with the reason printed. The GPU tests live in tests/gpu/test_cuda_harness_gpu.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = [ROOT / "workloads" / "gemm_allgather", ROOT / "workloads" / "kv_transfer"]
BLOCK = re.compile(r"// EVOLVE-BLOCK-START ?(\w*)\n(.*?)// EVOLVE-BLOCK-END", re.S)


def _nccl_home() -> str | None:
    try:
        import nvidia.nccl as m  # type: ignore
    except ImportError:
        return None
    home = list(m.__path__)[0]
    hdr = Path(home, "include", "nccl.h")
    if (
        not hdr.exists()
        or "#define NCCL_MINOR 28" not in hdr.read_text()
        or "#define NCCL_PATCH 9" not in hdr.read_text()
    ):
        return None
    return home


NVCC = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if Path("/usr/local/bin/nvcc").exists() else None)
NCCL = _nccl_home()
_why = (
    None
    if NVCC and NCCL
    else (
        "nvcc not found"
        if not NVCC
        else "nvidia-nccl-cu13==2.28.9 wheel not installed (pip install nvidia-nccl-cu13==2.28.9)"
    )
)
if _why:
    print(f"tests/test_cuda_workloads.py: compile tests skipped: {_why}")
needs_nvcc = pytest.mark.skipif(_why is not None, reason=_why or "")


def sources(w: Path) -> list[Path]:
    spec = yaml.safe_load((w / "workload.yaml").read_text())
    return [w / spec["candidate"]] + [w / v["file"] for v in spec.get("variants", [])]


def outside_blocks(text: str) -> str:
    return BLOCK.sub("<block>", text)


@pytest.mark.parametrize("w", WORKLOADS, ids=lambda p: p.name)
def test_workload_yaml_has_documented_fields(w):
    spec = yaml.safe_load((w / "workload.yaml").read_text())
    for key in [
        "name",
        "description",
        "language",
        "ranks",
        "candidate",
        "harness",
        "build",
        "launch",
        "timeouts",
        "benchmark",
        "configs",
        "tolerances",
        "design_space",
        "variants",
        "llm",
    ]:
        assert key in spec, f"{w.name}/workload.yaml: missing {key}"
    assert spec["name"] == w.name and spec["language"] == "cuda" and spec["build"]["nccl"] is True
    assert spec["launch"]["gpus"] == spec["ranks"] == 2
    assert spec["launch"]["env"]["NCCL_NVLS_ENABLE"] == "0"
    assert all(t > 0 for t in spec["timeouts"].values())
    for s in spec["harness"]["sources"] + spec["harness"]["headers"]:
        assert (w / s).exists(), s
    names = [Path(s).name for s in spec["harness"]["sources"] + spec["harness"]["headers"] + [spec["candidate"]]]
    assert len(names) == len(set(names)), "basenames must be unique (files land flat)"
    assert any(c["public"] is False for c in spec["configs"]), "needs a hidden config"
    assert any(c["bench"] for c in spec["configs"])
    dims = spec["design_space"]["dimensions"]
    for v in spec["variants"]:
        assert (w / v["file"]).exists()
        for k, val in v["point"].items():
            assert val in dims[k]["values"], (v["name"], k, val)


@pytest.mark.parametrize("src", [s for w in WORKLOADS for s in sources(w)], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_blocks_designs_and_knobs(src):
    text = src.read_text()
    blocks = BLOCK.findall(text)
    assert [b[0] for b in blocks] == ["kernels", "schedule"]
    for _, body in blocks:
        assert not any(line.lstrip().startswith("#") for line in body.splitlines()), "preprocessor line in a block"
    assert re.search(r"// cuco:design .*backend=", text)
    spec = yaml.safe_load(
        (src.parents[1] if src.parent.name == "variants" else src.parent).joinpath("workload.yaml").read_text()
    )
    dims = spec["design_space"]["dimensions"]
    for m in re.finditer(r"= (\w+);\s*// cuco:knob (\w+)", text):
        assert m.group(2) in dims and dims[m.group(2)].get("knob"), m.group(2)
    for m in re.finditer(r"// cuco:design (.*)", text):
        for kv in m.group(1).split():
            k, v = kv.split("=")
            assert v in dims[k]["values"], kv


@pytest.mark.parametrize("w", WORKLOADS, ids=lambda p: p.name)
def test_variants_differ_from_the_seed_only_inside_blocks(w):
    srcs = sources(w)
    seed = outside_blocks(srcs[0].read_text())
    for v in srcs[1:]:
        assert outside_blocks(v.read_text()) == seed, f"{v.name}: text outside the EVOLVE-BLOCKs differs from the seed"


def _nvcc(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [NVCC, "-std=c++17", "-arch=sm_90", "-O3", f"-I{NCCL}/include", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _stage(w: Path, src: Path, job: Path) -> list[str]:
    spec = yaml.safe_load((w / "workload.yaml").read_text())
    job.mkdir(parents=True, exist_ok=True)
    for p in spec["harness"]["sources"] + spec["harness"]["headers"]:
        shutil.copy(w / p, job / Path(p).name)
    shutil.copy(src, job / Path(spec["candidate"]).name)
    return [Path(spec["candidate"]).name] + [Path(p).name for p in spec["harness"]["sources"]]


@needs_nvcc
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_every_seed_and_variant_compiles(tmp_path):
    jobs = []
    for w in WORKLOADS:
        for s in sources(w):
            job = tmp_path / f"{w.name}-{s.stem}-{s.parent.name}"
            names = _stage(w, s, job)
            jobs.append((job, names[0]))
        job = tmp_path / f"{w.name}-frozen"
        names = _stage(w, sources(w)[0], job)
        jobs += [(job, n) for n in names[1:]]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as ex:
        results = list(ex.map(lambda j: (j, _nvcc(["-c", j[1], "-o", j[1] + ".o"], j[0])), jobs))
    for (job, name), r in results:
        assert r.returncode == 0, f"{job.name}/{name}:\n{r.stderr[-3000:]}"


@needs_nvcc
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_harness_links_and_its_json_writer_parses(tmp_path):
    w = WORKLOADS[0]
    names = _stage(w, sources(w)[0], tmp_path)
    r = _nvcc([*names, "-o", "bench", f"-L{NCCL}/lib", "-l:libnccl.so.2", "-Xlinker", f"-rpath,{NCCL}/lib"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    out = tmp_path / "result.json"
    r = subprocess.run(
        [str(tmp_path / "bench"), "--self-test-json", str(out)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["harness"] == "cuco-cuda/1" and res["mode"] == "benchmark"
    ok, bad = res["configs"]
    assert ok["speedup"] == pytest.approx(1.2 / 0.85, rel=1e-4) and ok["bound"] == pytest.approx(1.15 / 0.7, rel=1e-4)
    assert ok["speedup_interval"] == [1.3, 1.5] and ok["rounds"] == [[1.2, 0.85, 0], [1.2, 0.85, 1]]
    assert bad["name"] == 'odd "quoted"\tname' and bad["correct"] is False
    assert bad["mismatch"] == {
        "rank": 1,
        "config": bad["name"],
        "index": 4711,
        "expected": 1.5,
        "got": "nan",
        "what": "gather",
        "buffer": "C",
    }
    # a spec that is not valid JSON is answered with a result.json naming the problem, not a crash
    (tmp_path / "spec.json").write_text("{not json")
    r = subprocess.run(
        [str(tmp_path / "bench"), "--spec", "spec.json", "--result", "r2.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    res2 = json.loads((tmp_path / "r2.json").read_text())
    assert res2["correct"] is False and "invalid JSON" in res2["error"]
    assert res["nonce"] == "self-test-nonce-0123456789abcdef" and res2["nonce"] is None
    # the engine's nonce on stdin is echoed, even in an error result; without it the job fails
    r = subprocess.run(
        [str(tmp_path / "bench"), "--spec", "spec.json", "--result", "r3.json", "--nonce-stdin"],
        cwd=tmp_path,
        input="f00dfeedf00dfeedf00dfeedf00dfeed",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads((tmp_path / "r3.json").read_text())["nonce"] == "f00dfeedf00dfeedf00dfeedf00dfeed"
    r = subprocess.run(
        [str(tmp_path / "bench"), "--spec", "spec.json", "--result", "r4.json", "--nonce-stdin"],
        cwd=tmp_path,
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    res4 = json.loads((tmp_path / "r4.json").read_text())
    assert r.returncode == 2 and res4["correct"] is False and "nonce was missing" in res4["error"]
    assert res4["nonce"] is None


@pytest.mark.skipif(NVCC is None, reason="nvcc not found")
def test_validate_without_nccl_says_how_to_get_it_once(tmp_path):
    # A regular `nvidia` package first on the path hides the wheel's namespace package: no nvidia.nccl here.
    (tmp_path / "nvidia").mkdir()
    (tmp_path / "nvidia" / "__init__.py").write_text("")
    env = {k: v for k, v in os.environ.items() if k != "NCCL_HOME"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PATH"] = os.pathsep.join([str(Path(NVCC).parent), env.get("PATH", "")])
    r = subprocess.run(
        [sys.executable, "-m", "cuco_tui.cli", "--home", str(tmp_path / "h"), "validate", str(WORKLOADS[0])],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    out = " ".join(r.stdout.split())
    assert "NCCL headers are not found here" in out and "cuco[cuda]" in out and "NCCL_HOME" in out
    assert "compile failed" not in out  # one clear line, not one failure per source
