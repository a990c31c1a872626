#!/usr/bin/env python3
"""The CUDA harness's timelines (CUPTI) on a GPU node, for the shipped CUDA workloads' seeds and variants.

    python3 tests/gpu/timeline_gpu.py build DIR [WORKLOAD...]   # here: nvcc, the workloads' own build lines
    python3 tests/gpu/timeline_gpu.py run DIR OUT [--ranks 1]   # on the GPU node: every binary, benchmark mode
    python3 tests/gpu/timeline_gpu.py abab DIR OUT BINARY [N [RANKS]]  # timelines off/on, alternating, N pairs
    python3 tests/gpu/timeline_gpu.py ncu DIR OUT BINARY CONFIG # `cuco profile`'s job script on one binary

`build` compiles each workload's frozen sources once (-c) and links every shipped source against them (the
engine's frozen-object cache, by hand), and the test candidates of tests/gpu/timeline_candidates/ (a seed
with a copy-engine stage, so that a one-rank job has a memcpy to record). `run` writes a benchmark spec per binary with the workload's bench
configs at the job's rank count (a config's `ranks` param dropped: at one rank a two-rank shape still runs,
its communication being with itself), runs it as the launcher does, and prints per config: the speedup,
the timeline's source, its kernel / copy / memset records and the figures of engine/timeline/timeline.py. `abab`
measures what the profiled call costs: the same binary with `timeline: false` and `true`, alternating; the
speedups of both and each job's wall time. Results (result.json per job, summary.json) go to OUT.

`run` reads two settings from the environment: TL_CONFIGS (how many of a workload's bench configs, in its
workload.yaml's order; "all" for every one; default 2) and TL_ONLY (comma-separated WORKLOAD/NAME binaries, e.g.
"kv_transfer/ce_spread,kv_transfer/seed"; default every binary built).
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engine.timeline import timeline  # noqa: E402  (stdlib only: runs on the bare GPU image)

WORKLOADS = ("gemm_allgather", "kv_transfer")
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def configs_per_workload() -> int:
    raw = os.environ.get("TL_CONFIGS", "2")
    return 1 << 30 if raw == "all" else int(raw)


def _yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())


def nccl_home() -> str:
    if os.environ.get("NCCL_HOME"):
        return os.environ["NCCL_HOME"]
    import nvidia.nccl as m

    return list(m.__path__)[0]


def build(out: Path, workloads: list[str]) -> None:
    env = dict(os.environ, NCCL_HOME=nccl_home())
    for w in workloads:
        wdir = ROOT / "workloads" / w
        spec = _yaml(wdir / "workload.yaml")
        job = out / w
        job.mkdir(parents=True, exist_ok=True)
        for rel in [*spec["harness"]["sources"], *spec["harness"].get("headers", [])]:
            (job / Path(rel).name).write_bytes((wdir / rel).read_bytes())
        cmd = spec["build"]["command"]
        frozen = [Path(s).name for s in spec["harness"]["sources"]]
        objs = []
        for name in frozen:
            obj = name.rsplit(".", 1)[0] + ".frozen.o"
            subprocess.run(
                cmd.replace("{sources}", "-c " + shlex.quote(name)).replace("{binary}", obj),
                shell=True,
                cwd=job,
                env=env,
                check=True,
            )
            objs.append(obj)
        extra = sorted((ROOT / "tests" / "gpu" / "timeline_candidates").glob(f"{w}_*.cu"))
        for src in [wdir / spec["candidate"], *sorted((wdir / "variants").glob("*.cu")), *extra]:
            name = "seed" if src.parent == wdir else src.stem.removeprefix(f"{w}_")
            (job / spec["candidate"]).write_bytes(src.read_bytes())
            t0 = time.time()
            subprocess.run(
                cmd.replace("{sources}", " ".join([spec["candidate"], *objs])).replace("{binary}", f"bench.{name}"),
                shell=True,
                cwd=job,
                env=env,
                check=True,
            )
            print(f"built {w}/bench.{name} in {time.time() - t0:.0f} s", flush=True)


def bench_spec(w: str, ranks: int, timeline_on: bool, seed: int = 12345) -> dict:
    spec = _yaml(ROOT / "workloads" / w / "workload.yaml")
    configs, seen, most = [], set(), configs_per_workload()
    for c in spec["configs"]:
        if not c.get("bench"):
            continue
        params = {k: v for k, v in c.get("params", {}).items() if k != "ranks"}
        key = json.dumps(params, sort_keys=True)
        if key not in seen and len(configs) < most:
            seen.add(key)
            configs.append({"name": c["name"], "params": params})
    b = spec.get("benchmark", {})
    return {
        "mode": "benchmark",
        "seed": seed,
        "ranks": ranks,
        "configs": configs,
        "tolerances": spec.get("tolerances", {}),
        "warmup": b.get("warmup", 2),
        "iters": b.get("iters", 9),
        "timeout_s": 150,
        "timeline": timeline_on,
    }


def run_one(binary: Path, spec: dict, out: Path) -> tuple[dict, float]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ, **SAFE_ENV)
    env["LD_LIBRARY_PATH"] = f"{nccl_home()}/lib:" + env.get("LD_LIBRARY_PATH", "")  # built elsewhere
    t0 = time.monotonic()
    proc = subprocess.run(
        [str(binary.resolve()), "--spec", "spec.json", "--result", "result.json"],
        cwd=out,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    wall = time.monotonic() - t0
    (out / "log.txt").write_text(proc.stdout + proc.stderr)
    path = out / "result.json"
    return (
        json.loads(path.read_text())
        if path.exists()
        else {"error": f"no result (exit {proc.returncode})", "configs": []}
    ), wall


def describe(res: dict) -> list[dict]:
    rows = []
    for c in res.get("configs", []):
        row = {"config": c["name"], "correct": c.get("correct"), "speedup": c.get("speedup"), "error": c.get("error")}
        raw = c.get("timeline")
        if raw:
            counts: dict[str, int] = {}
            for e in raw["events"]:
                counts[e["k"]] = counts.get(e["k"], 0) + 1
            figs = timeline.figures(timeline.parse(c["name"], raw))
            row.update(
                source=raw["source"],
                records=counts,
                copies=sorted({e.get("copy") for e in raw["events"] if e.get("copy")}),
                figures={k: v for k, v in figs.items() if k != "ranks"},
                ranks=figs["ranks"],
            )
        else:
            row["timeline_error"] = c.get("timeline_error")
        rows.append(row)
    return rows


def run_all(bins: Path, out: Path, ranks: int) -> None:
    summary = {}
    only = {x for x in os.environ.get("TL_ONLY", "").split(",") if x}
    for binary in sorted(bins.glob("*/bench.*")):
        w, name = binary.parent.name, binary.name.split(".", 1)[1]
        if only and f"{w}/{name}" not in only:
            continue
        res, wall = run_one(binary, bench_spec(w, ranks, True), out / w / name)
        summary[f"{w}/{name}"] = {
            "wall_s": round(wall, 2),
            "correct": res.get("correct"),
            "error": res.get("error"),
            "configs": describe(res),
        }
        print(json.dumps({f"{w}/{name}": summary[f"{w}/{name}"]}, default=str), flush=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))


def abab(bins: Path, out: Path, which: str, pairs: int, ranks: int = 1) -> None:
    binary = bins / which
    w = binary.parent.name
    runs = []
    for i in range(pairs):
        for on in (False, True):
            res, wall = run_one(binary, bench_spec(w, ranks, on, seed=1000 + i), out / f"abab-{i}-{int(on)}")
            runs.append(
                {
                    "timeline": on,
                    "wall_s": wall,
                    "speedups": {c["name"]: c.get("speedup") for c in res.get("configs", [])},
                    "spreads": {
                        c["name"]: (c.get("baseline_spread"), c.get("candidate_spread")) for c in res.get("configs", [])
                    },
                }
            )
            print(json.dumps(runs[-1]), flush=True)
    for on in (False, True):
        sel = [r for r in runs if r["timeline"] == on]
        print(
            f"timeline {'on ' if on else 'off'}: wall median {statistics.median(r['wall_s'] for r in sel):.2f} s; "
            + "; ".join(
                f"{k} speedups {[round(r['speedups'][k], 4) for r in sel if r['speedups'].get(k)]}"
                for k in sel[0]["speedups"]
            )
        )
    (out / "abab.json").write_text(json.dumps(runs, indent=1))


def ncu(bins: Path, out: Path, which: str, config: str, ranks: int = 1) -> None:
    """`cuco profile`'s job (its script and spec) on a prebuilt binary: the report, its raw CSV page, the summary."""
    from cuco_tui.verbs.profile import ncu_script, summarize_ncu_csv

    binary = bins / which
    spec = bench_spec(binary.parent.name, ranks, False)
    wl = _yaml(ROOT / "workloads" / binary.parent.name / "workload.yaml")
    spec.update(
        mode="verify",
        configs=[
            {"name": c["name"], "params": {k: v for k, v in c["params"].items() if k != "ranks"}}
            for c in wl["configs"]
            if c["name"] == config
        ],
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(json.dumps(spec))
    (out / "cuco_candidate").write_bytes(binary.read_bytes())
    (out / "cuco_candidate").chmod(0o755)
    env = dict(os.environ, **SAFE_ENV)
    env["LD_LIBRARY_PATH"] = f"{nccl_home()}/lib:" + env.get("LD_LIBRARY_PATH", "")
    t0 = time.monotonic()
    proc = subprocess.run(["sh", "-c", ncu_script()], cwd=out, env=env, capture_output=True, text=True, timeout=240)
    print(f"ncu job: exit {proc.returncode} in {time.monotonic() - t0:.1f} s\n{proc.stderr[-1500:]}")
    kernels = summarize_ncu_csv((out / "summary.csv").read_text() if (out / "summary.csv").exists() else "")
    (out / "cuco_candidate").unlink()
    for k in kernels[:12]:
        print(json.dumps(k))


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "build":
        build(Path(argv[1]), argv[2:] or list(WORKLOADS))
    elif len(argv) >= 3 and argv[0] == "run":
        run_all(Path(argv[1]), Path(argv[2]), int(argv[4]) if len(argv) > 4 and argv[3] == "--ranks" else 1)
    elif len(argv) >= 5 and argv[0] == "ncu":
        ncu(Path(argv[1]), Path(argv[2]), argv[3], argv[4])
    elif len(argv) >= 4 and argv[0] == "abab":
        abab(
            Path(argv[1]),
            Path(argv[2]),
            argv[3],
            int(argv[4]) if len(argv) > 4 else 2,
            int(argv[5]) if len(argv) > 5 else 1,
        )
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
