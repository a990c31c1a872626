"""Two bursty neighbours for a measurement to survive: one spins a CPU, one copies memory, each busy and idle
by turns for tenths of a second (drawn at random, so no timing loop can fall into step with them).

    python tests/bench/hogs.py [--seconds N]        # until killed, or for N seconds

or, from Python (a test, a bench): `with bursty_hogs(): ...` starts both and stops them on the way out.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import random
import time
from collections.abc import Iterator

BURST_S = (0.1, 0.5)  # each busy and each idle stretch: a uniform draw in this range
COPY_BYTES = 64 << 20  # larger than any last-level cache here: every copy goes to memory


def _cpu(stop_at: float, seed: int) -> None:
    rng = random.Random(seed)
    while time.monotonic() < stop_at:
        busy_until = time.monotonic() + rng.uniform(*BURST_S)
        x = 0
        while time.monotonic() < busy_until:
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        time.sleep(rng.uniform(*BURST_S))


def _memory(stop_at: float, seed: int) -> None:
    rng = random.Random(seed)
    src, dst = bytearray(os.urandom(1 << 20) * (COPY_BYTES >> 20)), bytearray(COPY_BYTES)
    while time.monotonic() < stop_at:
        busy_until = time.monotonic() + rng.uniform(*BURST_S)
        while time.monotonic() < busy_until:
            dst[:] = src  # one memcpy of 64 MiB
        time.sleep(rng.uniform(*BURST_S))


@contextlib.contextmanager
def bursty_hogs(seconds: float = 24 * 3600.0, seed: int = 0) -> Iterator[list[mp.Process]]:
    """Both hogs running in processes of their own while the block runs; stopped (and joined) after it."""
    stop_at = time.monotonic() + seconds
    procs = [
        mp.Process(target=_cpu, args=(stop_at, seed), daemon=True, name="cpu-hog"),
        mp.Process(target=_memory, args=(stop_at, seed + 1), daemon=True, name="memory-hog"),
    ]
    for p in procs:
        p.start()
    try:
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join(5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=24 * 3600.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with bursty_hogs(args.seconds, args.seed) as procs:
        for p in procs:
            p.join()


if __name__ == "__main__":
    main()
