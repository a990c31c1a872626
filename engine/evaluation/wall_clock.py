"""The out-of-process cross-check of a benchmark's timings.

The harness times its calls with its own clock, inside the process the candidate runs in. The process
that launched the job (the executor, in the engine; run_local.py for a CUDA harness run by hand) times the
whole job from outside. The harness's calls ran one after another inside that job, so their times added
up (result.json's `timed_ms`) cannot exceed the job's wall time: a result whose timings do not fit was
measured by a clock that ran fast, and is not believed.
"""

from __future__ import annotations

from typing import Any

SLACK_MS = 5.0  # the clocks' resolution and the launcher's own bookkeeping


def timings_misfit(result: dict[str, Any], wall_s: float) -> str | None:
    """Why `result`'s timings cannot be true for a job that lasted `wall_s` seconds, or None."""
    timed = result.get("timed_ms")
    if isinstance(timed, bool) or not isinstance(timed, (int, float)):
        return None  # a harness that does not report it (its own host wall-time check still applies)
    wall_ms = wall_s * 1000.0
    if timed > wall_ms + SLACK_MS:
        return (
            f"the harness's timed calls add up to {timed:.1f} ms, more than the {wall_ms:.1f} ms the whole "
            "job took as measured by the launching process: its clock did not measure real time; not believed"
        )
    return None
