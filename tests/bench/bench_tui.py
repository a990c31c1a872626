"""TUI benchmark (a script, not a unit test).

    python tests/bench/bench_tui.py [--candidates 100000] [--rate 100] [--presses 30]
                                                    [--home DIR (reuse a filled store)] [--profile]

1. A store with N candidates (written straight with sqlite, in a child process): time until the app shows a
   usable screen (header counts + candidates window + islands), read-only. Measured twice: in this process
   from `CucoApp(...)` (imports done), and as a fresh process (`python -c ...` importing cuco_tui.app and
   running it headless) from spawn to the usable screen, which includes interpreter start and imports.
   Target <= 1.5 s.
2. A fake engine in *another process* streaming RATE events/s into the same 100,000-candidate run through the real daemon socket
   (EngineServer): the app connects to it like `cuco attach`. Each key press is injected into the app's
   driver (as a terminal would deliver it) and timed to (a) its handler running and (b) the next screen
   refresh after it. Keys: `/` (opens the filter) and `escape` (closes it), at random 50-150 ms intervals.
   Target <= 100 ms.
3. Peak RSS of this process (the TUI; the store fill and the engine run in children). Target < 300 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "tui"))

RUN = "bench-1"
LIVE = RUN  # the engine streams into the big run itself
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "tui")])}


def _usable(app) -> bool:
    from cuco_tui.widgets import CandidatesTable, IslandsTable

    try:
        return bool(
            app.query_one(CandidatesTable).row_count and app.query_one(IslandsTable).row_count and app.summary.evaluated
        )
    except Exception:  # noqa: BLE001 - not mounted yet
        return False


# ---- children


def child_fill(home: str, n: int) -> None:
    from storefill import fill_store

    fill_store(Path(home), run_id=RUN, n=n, blobs_for=50, fork=False)


def child_attach(home: str, t_spawn: float) -> None:
    """A fresh process: import the app, run it headless, print the time from spawn to a usable screen."""
    from cuco_tui.app import CucoApp

    async def go() -> None:
        app = CucoApp(Path(home), RUN)
        async with app.run_test(size=(80, 24)) as pilot:
            while not _usable(app):
                await asyncio.sleep(0.005)
            print(f"USABLE {time.time() - t_spawn:.4f}", flush=True)
            await pilot.pause(0.05)

    asyncio.run(go())


def child_engine(home: str, rate: float) -> None:
    """The event source: a FakeEngine behind the real EngineServer; prints the socket when ready."""
    from storefill import FakeEngine

    from engine.daemon.daemon import EngineServer

    async def go() -> None:
        engine = await FakeEngine.open(Path(home), LIVE, interval=2.0 / rate)  # 2 events per step
        server = EngineServer(engine, Path(home), LIVE)
        engine.store.on_event = server.on_event
        info = await server.start()
        task = asyncio.create_task(engine.run())
        print(f"SOCKET {info.socket}", flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.readline)  # the parent closes stdin to stop us
        await engine.stop()
        await asyncio.wait_for(task, 30)
        await server.close()
        print(f"CREATED {engine.created}", flush=True)

    asyncio.run(go())


# ---- measures


async def attach_time(home: Path, profile: bool) -> float:
    from cuco_tui.app import CucoApp

    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    app = CucoApp(home, RUN)
    async with app.run_test(size=(120, 40)) as pilot:
        while not _usable(app):
            await asyncio.sleep(0.002)
        elapsed = time.perf_counter() - t0
        if prof is not None:
            prof.disable()
            import pstats

            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        await pilot.pause(0.1)
    return elapsed


def attach_time_fresh_process(home: Path) -> float:
    t_spawn = time.time()
    out = subprocess.run(
        [sys.executable, __file__, "--child-attach", str(home), "--t-spawn", repr(t_spawn)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    for line in out.stdout.splitlines():
        if line.startswith("USABLE "):
            return float(line.split()[1])
    raise RuntimeError(f"the attach child failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")


async def key_latency(home: Path, rate: float, presses: int, warmup_s: float) -> dict:
    from textual import events

    from cuco_tui.app import CucoApp

    handled: dict[int, float] = {}
    refreshed: dict[int, float] = {}
    current = {"i": -1}

    class BenchApp(CucoApp):
        def _mark(self) -> None:
            i = current["i"]
            if i >= 0 and i not in handled:
                handled[i] = time.perf_counter()
                self.call_after_refresh(lambda: refreshed.setdefault(i, time.perf_counter()))

        def action_filter(self) -> None:
            super().action_filter()
            self._mark()

        def on_key(self, event) -> None:
            super().on_key(event)
            if event.key == "escape":
                self._mark()

    engine = subprocess.Popen(
        [sys.executable, __file__, "--child-engine", str(home), "--rate", str(rate)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        line = engine.stdout.readline()
        if not line.startswith("SOCKET "):
            raise RuntimeError(f"the engine child did not start: {line!r}")
        socket = line.split(" ", 1)[1].strip()
        app = BenchApp(home, LIVE, socket_path=socket)
        sent: dict[int, float] = {}
        async with app.run_test(size=(120, 40)) as pilot:
            while not app.live:
                await asyncio.sleep(0.01)
            await asyncio.sleep(warmup_s)
            applied0, t_start = app.events_applied, time.perf_counter()
            rng = random.Random(1)
            for n in range(presses * 2):
                key, char = ("slash", "/") if n % 2 == 0 else ("escape", "\x1b")
                current["i"] = n
                event = events.Key(key, char)
                event.set_sender(app)
                sent[n] = time.perf_counter()
                app._driver.send_message(event)
                deadline = time.perf_counter() + 5.0
                while n not in refreshed and time.perf_counter() < deadline:
                    await asyncio.sleep(0.001)
                await asyncio.sleep(rng.uniform(0.05, 0.15))
            stream_s = time.perf_counter() - t_start
            applied = app.events_applied - applied0
            rows = app.query_one("#candidates").row_count
            await pilot.pause(0.05)
    finally:
        engine.stdin.close()
        try:
            engine.wait(60)
        except subprocess.TimeoutExpired:
            engine.kill()
    lost = [n for n in sent if n not in handled]
    return {
        "handled": [(handled[n] - sent[n]) * 1000 for n in sent if n in handled],
        "refreshed": [(refreshed[n] - sent[n]) * 1000 for n in sent if n in refreshed],
        "lost": len(lost),
        "events_per_s": applied / stream_s,
        "rows": rows,
    }


def _pct(values: list[float]) -> str:
    v = sorted(values)
    if not v:
        return "none"
    return (
        f"p50 {statistics.median(v):.1f} ms, p95 {v[int(0.95 * (len(v) - 1))]:.1f} ms, max {v[-1]:.1f} ms (n={len(v)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--candidates", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--presses", type=int, default=30)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--home", help="a store filled by an earlier run of this script (skips the fill)")
    parser.add_argument("--profile", action="store_true", help="cProfile the in-process attach")
    parser.add_argument("--child-fill", help=argparse.SUPPRESS)
    parser.add_argument("--child-attach", help=argparse.SUPPRESS)
    parser.add_argument("--child-engine", help=argparse.SUPPRESS)
    parser.add_argument("--t-spawn", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_fill:
        child_fill(args.child_fill, args.candidates)
        return 0
    if args.child_attach:
        child_attach(args.child_attach, args.t_spawn)
        return 0
    if args.child_engine:
        child_engine(args.child_engine, args.rate)
        return 0

    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores")
    if args.home and (Path(args.home) / "cuco.db").exists():
        home = Path(args.home)
        print(f"reusing {home}")
    else:
        home = Path(args.home or tempfile.mkdtemp(prefix="cuco-bench-tui-"))
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, __file__, "--child-fill", str(home), "--candidates", str(args.candidates)],
            check=True,
            env=ENV,
        )
        print(f"filled {args.candidates} candidates in {time.perf_counter() - t0:.1f} s ({home})")

    attach = asyncio.run(attach_time(home, args.profile))
    print(f"attach (in process, 120x40): usable screen in {attach:.3f} s (target <= 1.5 s)")
    fresh = [attach_time_fresh_process(home) for _ in range(3)]
    print(
        f"attach (fresh process, 80x24, incl. interpreter start and imports): "
        f"{' '.join(f'{x:.3f}' for x in fresh)} s, median {statistics.median(fresh):.3f} s"
    )

    res = asyncio.run(key_latency(home, args.rate, args.presses, args.warmup))
    print(
        f"under {res['events_per_s']:.0f} events/s applied (source: another process, real socket; "
        f"{res['rows']} rows in the window):"
    )
    print(f"  key -> handler:      {_pct(res['handled'])}")
    print(f"  key -> screen shown: {_pct(res['refreshed'])}   (lost keys: {res['lost']})")
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of the TUI process {rss_mb:.0f} MB (target < 300 MB)")
    p95 = sorted(res["handled"])[int(0.95 * (len(res["handled"]) - 1))] if res["handled"] else float("inf")
    ok = attach <= 1.5 and statistics.median(fresh) <= 1.5 and p95 <= 100 and rss_mb < 300 and not res["lost"]
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
