"""SSH dispatch overhead over loopback with connection reuse (a script, not a unit test).

    python tests/bench/bench_ssh_dispatch.py [--jobs 200] [--concurrent 200]

Needs root and OpenSSH sshd (as tests/ssh). Starts two real sshd nodes on 127.0.0.1 and measures:
1. sequential jobs `true` on one warm node: end-to-end time per job (JobSpec in, JobResult out) and the
   dispatch overhead = end-to-end minus the command's own time (the median of running `true` directly);
2. the same with one input file the node already has (hash + cache hit) and one output brought back;
3. N concurrent short jobs over two nodes: wall time, failures (must be 0), connections opened.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "ssh"))

import conftest as sshd_fixtures  # noqa: E402  (tests/ssh/conftest.py: the real-sshd helpers)

from remote.cluster import load_cluster  # noqa: E402
from remote.jobs import JobSpec  # noqa: E402
from remote.ssh_executor import SSHExecutor  # noqa: E402


def own_time_of_true(n: int = 50) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(["true"], check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


async def bench(nodes, n_seq: int, n_conc: int) -> dict:
    cluster = load_cluster(nodes.cluster_yaml(node_extra={"a": {"cpu_slots": 128}, "b": {"cpu_slots": 128}}))
    one = replace(cluster, nodes=cluster.nodes[:1])
    out: dict = {}
    ex = SSHExecutor(one, nodes.home, user_known_hosts=[])
    await ex.start()
    try:
        await ex.run(JobSpec("warm", ["true"]))
        e2e = []
        for i in range(n_seq):
            t = time.perf_counter()
            r = await ex.run(JobSpec(f"seq-{i}", ["true"]))
            e2e.append(time.perf_counter() - t)
            assert r.ok, r
        out["seq_e2e_median_ms"] = statistics.median(e2e) * 1e3
        out["seq_e2e_p90_ms"] = sorted(e2e)[int(0.9 * len(e2e))] * 1e3
        data = b"x" * 100_000
        await ex.run(JobSpec("warm-file", ["true"], files={"in.bin": data}))
        e2e_f = []
        for i in range(n_seq):
            t = time.perf_counter()
            r = await ex.run(
                JobSpec(f"file-{i}", ["cp", "in.bin", "out.bin"], files={"in.bin": data}, outputs=["out.bin"])
            )
            e2e_f.append(time.perf_counter() - t)
            assert r.ok and r.outputs["out.bin"] == data, r
        out["file_e2e_median_ms"] = statistics.median(e2e_f) * 1e3
        out["uploads"] = ex.node("a").blobs.uploads
    finally:
        await ex.close()
    own = own_time_of_true()
    out["true_own_ms"] = own * 1e3
    out["seq_overhead_median_ms"] = out["seq_e2e_median_ms"] - own * 1e3

    ex = SSHExecutor(cluster, nodes.home, user_known_hosts=[])
    await ex.start()
    try:
        t = time.perf_counter()
        results = await asyncio.gather(
            *(ex.run(JobSpec(f"conc-{i}", ["sh", "-c", "sleep 0.05"])) for i in range(n_conc))
        )
        out["conc_wall_s"] = time.perf_counter() - t
        out["conc_failed"] = sum(not r.ok for r in results)
        out["conc_retried"] = sum(r.attempts > 1 for r in results)
        out["conc_by_node"] = {n: sum(r.node == n for r in results) for n in ("a", "b")}
        out["conc_connections"] = {n: ex.node(n).pool.connects for n in ("a", "b")}
        out["node_failures"] = sum(n.failures for n in ex.nodes())
    finally:
        await ex.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200, help="sequential jobs for the overhead median")
    ap.add_argument("--concurrent", type=int, default=200, help="concurrent jobs over two nodes")
    args = ap.parse_args()
    reason = sshd_fixtures.skip_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    user = sshd_fixtures.ensure_user()
    with sshd_fixtures.make_nodes(user) as nodes:
        res = asyncio.run(bench(nodes, args.jobs, args.concurrent))
    for k, v in res.items():
        print(f"{k}: {v:.2f}" if isinstance(v, float) else f"{k}: {v}")
    ok = res["seq_overhead_median_ms"] <= 30 and res["conc_failed"] == 0 and res["node_failures"] == 0
    print("PASS" if ok else "FAIL", "(target: overhead <= 30 ms, 0 failed jobs/channels)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
