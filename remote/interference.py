"""What else the node was doing while a job ran: its load and (on a virtual machine) steal time, read from
/proc around the job, and whether that was interference enough to measure again.

A benchmark's A/B rounds absorb a neighbour that comes and goes (each round's two calls see much the same
machine); what they cannot absorb is a machine so oversubscribed that the job's ranks wait for a core more than
they run, or a hypervisor taking the cores away (steal). Such a measurement is taken again (once; the engine
pools the two: engine/evaluation/evaluation.py) and counted in the run's report.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

STEAL_LIMIT = 0.05  # steal above this share of the CPU time: the hypervisor took the cores
OVERSUBSCRIBED = 3.0  # others' runnable work above this many times the node's cores


@dataclass(frozen=True)
class CpuTimes:
    total: int  # jiffies, every CPU
    steal: int
    load1: float  # the 1-minute load average


@dataclass(frozen=True)
class Interference:
    """Around one job: the highest 1-minute load seen, the share of CPU time stolen, the node's cores."""

    load: float
    steal: float
    cores: int
    job_cpus: int

    @property
    def interfered(self) -> bool:
        others = max(0.0, self.load - self.job_cpus)
        return self.steal > STEAL_LIMIT or others > OVERSUBSCRIBED * self.cores

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "load": round(self.load, 2),
            "steal": round(self.steal, 4),
            "interfered": self.interfered,
        }


def sample(proc: Path = Path("/proc")) -> CpuTimes | None:
    """The node's CPU counters now; None where /proc does not have them (not Linux)."""
    try:
        first = (proc / "stat").read_text().split("\n", 1)[0].split()
        load1 = float((proc / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if not first or first[0] != "cpu":
        return None
    fields = [int(x) for x in first[1:]]
    steal = fields[7] if len(fields) > 7 else 0
    return CpuTimes(sum(fields[:8]), steal, load1)  # guest time is already inside user


def between(before: CpuTimes | None, after: CpuTimes | None, job_cpus: int) -> Interference | None:
    if before is None or after is None:
        return None
    total = after.total - before.total
    steal = (after.steal - before.steal) / total if total > 0 else 0.0
    return Interference(max(before.load1, after.load1), max(0.0, steal), os.cpu_count() or 1, job_cpus)
