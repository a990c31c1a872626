"""The stages a candidate's evaluation passes through, and the jobs each one runs: named here once.

A stage name is also the harness's mode (verify, benchmark), the key of its timeout in workload.yaml and
the suffix of its job's id (`RUN-cCANDIDATE-STAGE`), from which a restarted engine tells its own jobs.
"""

from __future__ import annotations

BUILD = "build"
VERIFY = "verify"
BENCHMARK = "benchmark"
STAGES = (BUILD, VERIFY, BENCHMARK)

# Job-id suffixes beyond the stages: the frozen harness compiled once, and the benchmark repeated on fresh
# inputs to confirm a would-be best.
FROZEN = "frozen"
CONFIRM = "benchmark2"
JOB_SUFFIXES = (FROZEN, BUILD, VERIFY, BENCHMARK, CONFIRM)


def job_ids(prefix: str) -> set[str]:
    """Every job id an evaluation under `prefix` may run (a first attempt's)."""
    return {f"{prefix}-{suffix}" for suffix in JOB_SUFFIXES}
