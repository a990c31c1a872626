"""The demo's seed and variants evaluated as the engine does, with the engine and harness of the tree this
runs in; prints one JSON line of speedups. Run it alternately in two trees for an A B A B comparison:

    (cd TREE_A && PYTHONPATH=. python /path/to/demo_tree_ab.py before)
    (cd TREE_B && PYTHONPATH=. python /path/to/demo_tree_ab.py after)      # and again, b a b a

docs/measurements/integrity.md ("The symbol policy, the vDSO clock ...") has a run.
"""

import asyncio
import json
import sys
import tempfile

from engine.blocks import replace_blocks
from engine.evaluation.evaluation import FrozenObjectCache, evaluate_source
from engine.workload import load_workload
from remote.local import LocalExecutor


async def main(tag: str) -> None:
    w = load_workload("demo")
    sources = {
        "seed": w.seed_source,
        **{v.name: replace_blocks(w.seed_source, v.bodies) for v in w.design_space.variants},
    }
    executor = LocalExecutor(work_dir=tempfile.mkdtemp())
    frozen = FrozenObjectCache()
    out = {}
    try:
        for name, src in sources.items():  # one at a time: nothing else of ours competes for the cores
            o = await evaluate_source(w, src, executor, job_prefix=f"{tag}-{name}", seed=1234, frozen=frozen)
            bench = (o.metrics or {}).get("benchmark", {})
            configs = bench.get("configs", [])
            wall = [s.duration_s for s in o.stages if s.stage == "benchmark"]
            out[name] = {
                "status": o.status,
                "speedup": o.speedup,
                "configs": {c["name"]: round(c["speedup"], 3) for c in configs},
                # the benchmark job: its timed calls, its checks (untimed; absent before they were
                # timed) and its wall time, for the cost of verification
                "timed_ms": bench.get("timed_ms"),
                "check_ms": bench.get("check_ms"),
                "wall_ms": round(wall[-1] * 1000, 1) if wall else None,
            }
    finally:
        await executor.close()
    print(json.dumps({"tree": tag, **out}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
