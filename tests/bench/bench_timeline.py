"""What the profiled call costs, on the CPU demo: the harness with its timeline off and on, alternating.

    python tests/bench/bench_timeline.py [--pairs 6] [--variant fused]

Builds the demo's seed and a shipped variant with the workload's own build line, then runs each benchmark job
(the engine's spec: bench configs, warm-ups, timed pairs) with `timeline: false` and `timeline: true`, A B A B,
`--pairs` times each. Reports per side the median job wall time (the process, as the executor sees it) and
each config's A B speedup with its spread; and the two targets:

  - the profiled call adds < 10 % to a job's time: the median over pairs of (on - off) / off, each pair's two
    jobs run back to back (a busy machine's drift cancels as in the harness's own A B A B);
  - profiling does not move the score: per config, |median speedup on - median speedup off| within the
    speedups' measured spread (the larger interquartile range of the two sides).

Exit 0 when both hold, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engine import blocks  # noqa: E402
from engine.evaluation.evaluation import spec_json  # noqa: E402
from engine.workload import load_workload  # noqa: E402


def build(workload, source: str, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    for name, data in workload.harness_files.items():
        (out / name).write_bytes(data)
    (out / workload.candidate_name).write_text(source)
    sources = " ".join(shlex.quote(s) for s in [workload.candidate_name, *workload.harness_sources])
    cmd = workload.build_command.replace("{sources}", sources).replace("{binary}", "bench")
    subprocess.run(cmd, shell=True, cwd=out, check=True, timeout=300)
    return out / "bench"


def iqr(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[(3 * len(xs)) // 4] - xs[len(xs) // 4] if len(xs) >= 4 else max(xs) - min(xs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--variant", default="fused")
    a = ap.parse_args()
    workload = load_workload("demo")
    variant = next(v for v in workload.design_space.variants if v.name == a.variant)
    tmp = Path(tempfile.mkdtemp(prefix="cuco-bench-timeline-"))
    binaries = {
        "seed": build(workload, workload.seed_source, tmp / "seed"),
        a.variant: build(workload, blocks.replace_blocks(workload.seed_source, variant.bodies), tmp / a.variant),
    }
    base_spec = json.loads(spec_json(workload, "benchmark", 4242))
    runs = []
    for i in range(a.pairs):
        for name, binary in binaries.items():
            for on in (False, True) if i % 2 == 0 else (True, False):  # A B, then B A
                spec = dict(base_spec, seed=4242 + i, timeline=on)
                job = binary.parent / f"job-{i}-{int(on)}"
                job.mkdir()
                (job / "spec.json").write_text(json.dumps(spec))
                t0 = time.monotonic()
                subprocess.run(
                    [str(binary), "--spec", "spec.json", "--result", "result.json"], cwd=job, check=True, timeout=120
                )
                wall = time.monotonic() - t0
                res = json.loads((job / "result.json").read_text())
                assert res["correct"], res
                assert all(("timeline" in c) == on for c in res["configs"]), "the spec's timeline flag was not obeyed"
                runs.append(
                    {
                        "source": name,
                        "pair": i,
                        "timeline": on,
                        "wall_s": wall,
                        "call_ms": sum(c["candidate_ms"] for c in res["configs"]),
                        "speedups": {c["name"]: c["speedup"] for c in res["configs"]},
                    }
                )
    ok = True
    print(f"{'source':10} {'timeline':8} {'job wall s (median)':>20}  speedups per config: median (IQR)")
    for name in binaries:
        walls = {}
        for on in (False, True):
            sel = [r for r in runs if r["source"] == name and r["timeline"] == on]
            walls[on] = statistics.median(r["wall_s"] for r in sel)
            per = {c: [r["speedups"][c] for r in sel] for c in sel[0]["speedups"]}
            print(
                f"{name:10} {'on' if on else 'off':8} {walls[on]:20.3f}  "
                + "  ".join(f"{c} {statistics.median(v):.3f} ({iqr(v):.3f})" for c, v in per.items())
            )
        wall_of = {(r["pair"], r["timeline"]): r["wall_s"] for r in runs if r["source"] == name}
        added = statistics.median(wall_of[(i, True)] / wall_of[(i, False)] - 1 for i in range(a.pairs))
        call = statistics.median(r["call_ms"] for r in runs if r["source"] == name) / 1e3 / walls[False]
        print(
            f"{name:10} the profiled call adds {100 * added:+.1f} % to a job's wall time (target < 10 %); "
            f"one candidate call per config, what it costs at least, is {100 * call:.1f} % of the job"
        )
        ok = ok and added < 0.10
        for c in runs[0]["speedups"]:
            on_ = [r["speedups"][c] for r in runs if r["source"] == name and r["timeline"]]
            off = [r["speedups"][c] for r in runs if r["source"] == name and not r["timeline"]]
            diff, spread = abs(statistics.median(on_) - statistics.median(off)), max(iqr(on_), iqr(off))
            agree = diff <= spread
            ok = ok and agree
            print(
                f"{name:10} {c}: speedup on - off = {diff:.3f}, spread {spread:.3f}: "
                f"{'within' if agree else 'OUTSIDE'} the spread"
            )
    print(json.dumps({"pairs": a.pairs, "runs": runs}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
