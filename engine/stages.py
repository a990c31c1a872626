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


def run_jobs_pattern(run_id: str) -> str:
    """A pattern that matches exactly the job ids of run `run_id` (`RUN-cN-SUFFIX`, and `RUN-cN-rM-SUFFIX` for
    a retry after an environment fault), and no other run's even
    where one run's name begins with another's: a regular expression valid both as POSIX ERE (the remote
    reconcile scripts' `grep -xE`) and for Python's `re.fullmatch`. Characters other than letters, digits,
    '_' and '-' are bracketed, so a '.' in a run's name matches only itself."""
    name = "".join(c if c.isalnum() or c in "_-" else f"[{c}]" for c in run_id)
    return f"{name}-c[0-9]+(-r[0-9]+)?-({'|'.join(JOB_SUFFIXES)})"


def job_ids(prefix: str) -> set[str]:
    """Every job id an evaluation under `prefix` may run (a first attempt's)."""
    return {f"{prefix}-{suffix}" for suffix in JOB_SUFFIXES}
