"""Lineage and sorting benchmark (a script, not a unit test).

    python tests/bench/bench_lineage.py [--candidates 100000] [--depth 200] [--repeats 9] [--home DIR]

A store of N candidates on 2 islands (tests/tui/storefill.py: each candidate's parent is the one two
before it, so candidate 2*D+1 is D generations deep). Read-only, as `cuco attach` without an engine.

1. Lineage of a candidate D generations deep: (a) the queries alone (engine.views.lineage.lineage: the
   ancestors, the best's path, the children and their counts), (b) in the app, from pressing `L` with
   the candidate selected to the lineage screen's tree drawn with its D+1 lines. Target < 300 ms.
2. Sorting the candidates table by speedup: (a) the query alone (StoreView.candidates sorted: the top
   1000 of the whole run), (b) in the app, from pressing `s` to the table holding the sorted rows and
   redrawn. Target < 200 ms.
3. What the Lineage tab adds to loading a candidate's detail (StoreView.detail, which every cursor move
   runs in a worker): lineage_text alone against the whole detail, interleaved A B A B.

Each figure: the median and the worst of --repeats runs (the first, cold, run reported apart).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "tui"))

RUN = "bench-lineage-1"


def fill(home: Path, n: int) -> None:
    # In a child: the fill's memory and sqlite caches are not this process's.
    code = (
        "import sys; from pathlib import Path; from storefill import fill_store; "
        f"fill_store(Path({str(home)!r}), run_id={RUN!r}, n={n}, blobs_for=1000, fork=False)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT / "tests" / "tui")


def stats(samples: list[float]) -> str:
    ms = [s * 1000 for s in samples]
    return f"cold {ms[0]:.1f} ms, then median {statistics.median(ms[1:]):.1f} ms, max {max(ms[1:]):.1f} ms"


def bench_queries(home: Path, deep: int, repeats: int) -> None:
    from cuco_tui.data import StoreView
    from cuco_tui.lineage_view import lineage_text
    from engine.views import lineage as lineage_data

    view = StoreView(home)
    try:
        samples, size = [], 0
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            data = lineage_data.lineage(view.fetch, RUN, deep)
            samples.append(time.perf_counter() - t0)
            size = len(data.chain)
        print(f"lineage queries, #{deep} ({size - 1} ancestors, children, counts; no stars yet): {stats(samples)}")
        samples, known = [], 0
        for _ in range(3):
            walker = lineage_data.BestPaths()  # a fresh one: the whole walk from the best to its seed
            t0 = time.perf_counter()
            best, path = walker.get(view.fetch, RUN)
            samples.append(time.perf_counter() - t0)
            known = len(path)
        t0 = time.perf_counter()
        walker.get(view.fetch, RUN)
        again = time.perf_counter() - t0
        print(
            f"path to the best #{best} ({known} candidates long), walked once per best: "
            f"{', '.join(f'{x * 1000:.0f}' for x in samples)} ms; known already: {again * 1000:.1f} ms"
        )
        samples = []
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            rows = view.candidates(RUN, sort=("speedup", True))
            samples.append(time.perf_counter() - t0)
        assert rows[0]["speedup"] >= rows[-1]["speedup"]
        print(f"sort query (top {len(rows)} by speedup of the run): {stats(samples)}")
        a, b = [], []
        for _ in range(repeats):  # A B A B: the tab's text, the whole detail (which includes it)
            t0 = time.perf_counter()
            lineage_text(view.fetch, RUN, deep, view.best_paths)
            a.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            view.detail(deep)
            b.append(time.perf_counter() - t0)
        print(
            f"detail of #{deep}: whole {statistics.median(b) * 1000:.1f} ms, of which the Lineage tab's text "
            f"{statistics.median(a) * 1000:.1f} ms (medians of {repeats}, interleaved)"
        )
    finally:
        view.close()


async def bench_app(home: Path, deep: int, repeats: int) -> None:
    from textual.widgets import Tree

    from cuco_tui.app import CucoApp
    from cuco_tui.screens.lineage import LineageScreen
    from cuco_tui.widgets import CandidatesTable

    app = CucoApp(home, RUN)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(CandidatesTable)
        while not (table.row_count and app.summary.evaluated):
            await pilot.pause(0.05)
        await app.workers.wait_for_complete()

        async def until(predicate, step: float = 0.002) -> None:
            while not predicate():
                await asyncio.sleep(step)

        lineage_samples, lineage_cpu = [], []
        for _ in range(repeats + 1):
            table.sort = None
            app.select_candidate(deep) if deep in table.row_ids() else None
            app.sort = None
            # the deep candidate is old: show it through a filter, as a user would (id=...)
            app.filter_text = f"id={deep}"
            app._load_candidates(app.filter_text, None)
            await until(lambda: table.row_ids() == [deep])
            await pilot.pause(0.05)
            t0, c0 = time.perf_counter(), time.process_time()
            await pilot.press("L")
            await until(lambda: isinstance(app.screen, LineageScreen) and app.screen.lineage is not None)
            screen = app.screen
            await until(lambda screen=screen: len(screen.query_one(Tree).root.children) == deep_depth(screen))
            await pilot.pause(0)  # the refresh that draws it
            lineage_samples.append(time.perf_counter() - t0)
            lineage_cpu.append(time.process_time() - c0)
            await pilot.press("escape")
            await until(lambda: not isinstance(app.screen, LineageScreen))
        print(
            f"app: L to the lineage screen drawn (#{deep}, {deep_depth(screen)} lines): {stats(lineage_samples)}"
            " (the first press also walks the best's path, after drawing)"
        )
        print(f"     CPU time of this process over the same span: {stats(lineage_cpu)}")

        app.filter_text = ""
        app._load_candidates("", None)
        await until(lambda: table.row_count > 1 and table.sort is None)
        table.focus()
        sort_samples, sort_cpu = [], []
        for _ in range(repeats + 1):
            t0, c0 = time.perf_counter(), time.process_time()
            await pilot.press("s")
            await until(lambda: table.sort == ("speedup", True))
            await pilot.pause(0)
            sort_samples.append(time.perf_counter() - t0)
            sort_cpu.append(time.process_time() - c0)
            speeds = [float(t.rstrip("x")) for t in (table.cell_text(c, "speedup") for c in table.row_ids()) if t]
            assert speeds == sorted(speeds, reverse=True)
            for _ in range(8):  # cycle back to proposal order for the next press
                before = table.sort
                await pilot.press("s")
                await until(lambda before=before: table.sort != before)
                if table.sort is None:
                    break
        print(f"app: s to the table sorted by speedup ({table.row_count} rows of the whole run): {stats(sort_samples)}")
        print(f"     CPU time of this process over the same span: {stats(sort_cpu)}")


def deep_depth(screen) -> int:
    return len(screen.lineage.chain) if screen.lineage else -1


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--candidates", type=int, default=100_000)
    parser.add_argument("--depth", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--home", help="reuse (or make) a filled store here")
    args = parser.parse_args()
    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="cuco-bench-lineage-"))
    if not (home / "cuco.db").exists():
        t0 = time.perf_counter()
        fill(home, args.candidates)
        print(f"filled {args.candidates} candidates in {time.perf_counter() - t0:.1f} s ({home})")
    deep = 2 * args.depth + 1  # storefill: parent = id - 2 (2 islands), generation = number // 2
    print(f"before: {load()}")
    bench_queries(home, deep, args.repeats)
    asyncio.run(bench_app(home, deep, args.repeats))
    print(f"after: {load()}")


if __name__ == "__main__":
    main()
