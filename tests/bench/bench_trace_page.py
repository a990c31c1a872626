"""How large a trace the offline trace page (`cuco export --trace N --html`) opens, in headless chromium.

    python tests/bench/bench_trace_page.py [--sizes 1000,10000,40000,120000] [--repeat 3]

For each size, a synthetic timeline of 8 ranks and 2 configs with that many kernels and puts (per rank a
compute lane of kernels and a link lane of puts under them, as the demo records; the 1 us gaps between them
add idle slices, so more slices are drawn) goes through `timeline.chrome_trace` and `trace_html.render`
like the export, and the page is opened in Debian's headless chromium (chromedriver, selenium) `--repeat`
times. Reports per size: slices, page size, the median time from navigation to the page drawn (the page
sets `data-rendered` when its script is done), and the median time of one zoom step (the + button). The
target: a trace at the harness's cap (20,000 records per config, 40,000 over 2 configs: size 40000) opens
in under 5 s. Exit 0 when it holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cuco_tui import trace_html  # noqa: E402
from engine.timeline import timeline  # noqa: E402
from engine.timeline.timeline import ConfigTimeline, Interval, RankTimeline  # noqa: E402
from tests.browser import open_chromium  # noqa: E402

RANKS, CONFIGS, CAP_SLICES, TARGET_S = 8, ("tall", "square"), 40_000, 5.0


def synthetic(slices: int) -> dict:
    per_rank = max(1, slices // (2 * RANKS * len(CONFIGS)))
    timelines = {}
    for config in CONFIGS:
        ranks = []
        for r in range(RANKS):
            ivs, t = [], 0.0
            for i in range(per_rank):
                ivs.append(Interval(f"rank {r}", "compute", f"kernel_{i % 7}", t, t + 3))
                ivs.append(
                    Interval(f"link {r}", "comm", f"put -> rank {(r + 1) % RANKS}", t + 1, t + 4, {"bytes": 4096})
                )
                t += 5
            ranks.append(RankTimeline(r, 0.0, t, ivs))
        timelines[config] = ConfigTimeline(config, "cpu-link", ranks)
    return timeline.chrome_trace(timelines, title=f"synthetic, {slices} slices")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,40000,120000")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if str(CAP_SLICES) not in args.sizes.split(","):
        ap.error(f"--sizes must hold {CAP_SLICES} (the size the target is about)")
    work = Path(tempfile.mkdtemp(prefix="bench-trace-page-"))
    driver = open_chromium(work / "profile", 1400, 800)
    ok = True
    print(f"{'slices':>8} {'page MB':>8} {'open s':>7} {'zoom s':>7}")
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            trace = synthetic(size)
            page = work / f"trace-{size}.html"
            page.write_text(trace_html.render(trace), encoding="utf-8")
            drawn = sum(1 for e in trace["traceEvents"] if e["ph"] == "X")
            opens, zooms = [], []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                driver.get(page.as_uri())
                assert driver.execute_script("return document.body.getAttribute('data-rendered')") == str(drawn)
                opens.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                driver.find_element("css selector", "#zoom-in").click()
                driver.execute_script("return 1")  # the click's handler (the re-layout) has run
                zooms.append(time.perf_counter() - t0)
            errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            assert not errors, errors
            print(
                f"{drawn:8d} {page.stat().st_size / 1e6:8.2f} {statistics.median(opens):7.2f} "
                f"{statistics.median(zooms):7.2f}"
            )
            if size == CAP_SLICES and statistics.median(opens) >= TARGET_S:
                ok = False
    finally:
        driver.quit()
    print(f"target: {CAP_SLICES} records open in < {TARGET_S:.0f} s: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
