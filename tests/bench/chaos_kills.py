"""The chaos suite's long form: 50 random SIGKILLs of the headless engine on one demo run, a resume after
each, then every invariant of tests/chaos/test_kills.py. Prints what was done and checked.

    python tests/bench/chaos_kills.py [--kills 50] [--max-evals 60] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.chaos.chaos import check_invariants, random_kills  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=50)
    p.add_argument("--max-evals", type=int, default=60)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="cuco-chaos-") as tmp:
        home = Path(tmp) / "home"
        t0 = time.monotonic()
        log = random_kills(home, "chaos", args.max_evals, args.kills, random.Random(args.seed), timeout_s=3600)
        counts = check_invariants(home, "chaos", args.max_evals)
        print(f"kills landed: {log.kills} of {args.kills} (evaluations finished at each kill: {log.killed_at_finals})")
        print(
            f"checked: {counts['candidates']} candidates, {counts['stages']} stage records, {counts['events']} events: "
            "no proposal lost or duplicated, every stage once per candidate (a re-measure aside), no seq twice, "
            "no candidate failed for the environment, no process of the run left"
        )
        print(f"wall time: {time.monotonic() - t0:.0f} s")
        return 0 if log.kills >= args.kills else 1


if __name__ == "__main__":
    sys.exit(main())
