"""TUI benchmark (a script, not a unit test).

    /work/venv/bin/python tests/bench/bench_tui.py [--candidates 100000] [--rate 100]

1. A store with N candidates (written straight with sqlite): time until the attached app shows a usable
   screen (header summary + candidates window + islands) — target <= 1.5 s.
2. A fake engine streaming RATE events/s through the real daemon socket (EngineServer): the latency of
   key presses (`/` opens the filter, `escape` closes it) — target <= 100 ms.
3. Peak RSS of the process — target < 300 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "tui"))

from storefill import FakeEngine, fill_store  # noqa: E402

from cuco_tui.app import CucoApp  # noqa: E402
from cuco_tui.widgets import CandidatesTable, IslandsTable  # noqa: E402
from engine.daemon import EngineServer  # noqa: E402

RUN = "bench-1"


async def attach_time(home: Path) -> float:
    app = CucoApp(home, RUN)
    t0 = time.perf_counter()
    async with app.run_test(size=(120, 40)) as pilot:
        while True:
            table = app.query_one(CandidatesTable)
            if table.row_count and app.query_one(IslandsTable).row_count and app.summary.get("evaluated"):
                break
            await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - t0
        await pilot.pause(0.1)
    return elapsed


async def key_latency(home: Path, rate: float, presses: int) -> tuple[list[float], int]:
    engine = await FakeEngine.open(home, RUN + "-live", interval=2.0 / rate)   # 2 events per step
    server = EngineServer(engine, home, engine.run_id)
    engine.store.on_event = server.on_event
    info = await server.start()
    task = asyncio.create_task(engine.run())
    app = CucoApp(home, engine.run_id, socket_path=info.socket)
    latencies = []
    async with app.run_test(size=(120, 40)) as pilot:
        while not app.live:
            await asyncio.sleep(0.01)
        await asyncio.sleep(2.0)
        for _ in range(presses):
            for key in ("slash", "escape"):
                t0 = time.perf_counter()
                await pilot.press(key)
                latencies.append(time.perf_counter() - t0)
            await asyncio.sleep(0.1)
        applied = app.events_applied
    await engine.stop()
    await asyncio.wait_for(task, 30)
    await server.close()
    return latencies, applied


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--candidates", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--presses", type=int, default=20)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="cuco-bench-tui-"))
    t0 = time.perf_counter()
    fill_store(home, run_id=RUN, n=args.candidates, blobs_for=50, fork=False)
    print(f"filled {args.candidates} candidates in {time.perf_counter() - t0:.1f} s ({home})")
    attach = asyncio.run(attach_time(home))
    print(f"attach: usable screen in {attach:.3f} s (target <= 1.5 s)")
    lat, applied = asyncio.run(key_latency(home, args.rate, args.presses))
    lat_ms = sorted(x * 1000 for x in lat)
    p50 = statistics.median(lat_ms)
    p95 = lat_ms[int(0.95 * (len(lat_ms) - 1))]
    print(f"keys under {args.rate:.0f} events/s: p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {lat_ms[-1]:.1f} ms "
          f"over {len(lat_ms)} presses ({applied} events applied) (target <= 100 ms)")
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {rss_mb:.0f} MB (target < 300 MB)")
    ok = attach <= 1.5 and p95 <= 100 and rss_mb < 300
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
