#!/usr/bin/env python3
"""The CUDA harness before and after the clock change, A B A B on one GPU, and the adversarial CUDA
candidates that pass the symbol policy, measured by the harness (run on the GPU machine).

    python3 tests/gpu/integrity_ab.py BIN_DIR OUT_DIR [--rounds 2] [--workload W --ranks R --configs A,B
                                                      --sources S1,S2 --adversarial ''|A1,A2]

BIN_DIR holds harness binaries linked from the same candidate objects against the harness before
(`NAME.before`) and after (`NAME.after`); `NAME` is seed, a gemm_allgather variant, or an adversarial
candidate (call_counting, escape, slow). Each run is one job as run_local.py launches it: spec.json,
a nonce on stdin, result.json, and this process's own wall time checked against the harness's timed_ms
(engine/evaluation/wall_clock.py). At 1 rank gemm_allgather's bench configs (2 and 4 ranks) do not apply: the two
hidden configs are benchmarked. kv_transfer needs exactly 2 ranks: on a 2-GPU node, with binaries from
tests/gpu/build_harness_ab.sh, `--workload kv_transfer --ranks 2 --configs l32_t2k_d1k,small_l16_t1k
--sources seed,lsa_fused,copy_engine,ce_counters --adversarial ''`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from engine.evaluation.wall_clock import timings_misfit  # noqa: E402

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
VARIANTS = ["seed", "lsa_fused", "lsa_chunked", "copy_engine", "hybrid"]
CONFIGS = ["hidden_odd", "hidden_tall"]


def spec(mode: str, seed: int, workload: str = "gemm_allgather", ranks: int = 1, names: list[str] = CONFIGS) -> dict:
    w = yaml.safe_load((ROOT / "workloads" / workload / "workload.yaml").read_text())
    configs = [{"name": c["name"], "params": c["params"]} for c in w["configs"] if c["name"] in names]
    return {
        "mode": mode,
        "seed": seed,
        "ranks": ranks,
        "configs": configs,
        "tolerances": w["tolerances"],
        "warmup": w["benchmark"]["warmup"],
        "iters": w["benchmark"]["iters"],
        "timeout_s": 110,
    }


def run(binary: Path, mode: str, seed: int, **where) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "spec.json").write_text(json.dumps(spec(mode, seed, **where)))
        nonce = secrets.token_hex(16)
        t0 = time.monotonic()
        p = subprocess.run(
            [str(binary), "--spec", "spec.json", "--result", "result.json", "--nonce-stdin"],
            cwd=tmp,
            input=nonce.encode(),
            capture_output=True,
            timeout=120,
            env={**os.environ, **SAFE_ENV},
        )
        wall = time.monotonic() - t0
        path = Path(tmp, "result.json")
        if not path.exists():
            return {
                "correct": False,
                "error": f"no result.json (exit {p.returncode}): {p.stderr.decode()[-300:]}",
                "wall_s": wall,
            }
        res = json.loads(path.read_text())
    if res.get("nonce") != nonce:
        res = {"correct": False, "error": "nonce mismatch"}
    misfit = timings_misfit(res, wall)
    if misfit:
        res = {**res, "correct": False, "error": misfit}
    res["wall_s"] = round(wall, 2)
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bins", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workload", default="gemm_allgather")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--sources", default=",".join(VARIANTS))
    ap.add_argument("--adversarial", default="call_counting,escape,slow")
    a = ap.parse_args()
    where = {"workload": a.workload, "ranks": a.ranks, "names": a.configs.split(",")}
    sources = [x for x in a.sources.split(",") if x]
    a.bins = a.bins.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in sources:  # every source verifies with the new harness
        r = run(a.bins / f"{name}.after", "verify", 11, **where)
        print(f"verify {name}: correct={r.get('correct')} error={r.get('error')}", flush=True)
        rows.append({"phase": "verify", "source": name, "result": r})
    for rnd in range(a.rounds):  # A B A B: before, after, before, after
        for version in ("before", "after"):
            for name in sources:
                r = run(a.bins / f"{name}.{version}", "benchmark", 100 + rnd, **where)
                ratios = {c["name"]: c.get("speedup") for c in r.get("configs", [])}
                print(
                    f"round {rnd} {version:6} {name:12} correct={r.get('correct')} {ratios} "
                    f"timed_ms={r.get('timed_ms')} check_ms={r.get('check_ms')} wall_s={r.get('wall_s')}",
                    flush=True,
                )
                rows.append({"phase": "ab", "round": rnd, "version": version, "source": name, "result": r})
    for name in [x for x in a.adversarial.split(",") if x]:  # the adversarial ones that pass the policy
        r = run(a.bins / f"{name}.after", "benchmark", 7, **where)
        print(
            f"adversarial {name}: correct={r.get('correct')} error={r.get('error')} "
            f"{[(c['name'], c.get('speedup'), c.get('error')) for c in r.get('configs', [])]}",
            flush=True,
        )
        rows.append({"phase": "adversarial", "source": name, "result": r})
    (a.out / "integrity_ab.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
