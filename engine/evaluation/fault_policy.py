"""What the engine does when a candidate's evaluation meets an environment fault (`faults`).

- Retry: the evaluation runs again after a backoff (1 s, 2 s, 4 s, ... capped); the SSH executor has
  already tried the job on another node where there is one, so this is for faults that outlast that.
- Pause: the fault persists (the disk stays full, no node is left, several candidates in a row met an
  environment fault with no clean evaluation between): the run pauses itself with the reason and what
  to do, and the candidate waits, pending, for `cuco resume`.
- Blame: one candidate keeps meeting an "environment" fault while others evaluate cleanly. The
  environment is shared, so this one is the candidate's own (a candidate that prints "No space left on
  device", or whose compile the OOM killer keeps ending): it is recorded failed like any other failure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from . import faults
from .evaluation import EvalOutcome

RETRY, PAUSE, BLAME = "retry", "pause", "blame"

log = logging.getLogger(__name__)

_WHAT_TO_DO = {
    faults.NO_SPACE: "free space (the project home, its jobs/ folder, or the nodes' work dirs), then `cuco resume`",
    faults.STORE: "make the project home writable (or close what holds cuco.db), then `cuco resume`",
    faults.NO_NODE: "bring a node back (`cuco nodes check CLUSTER` says what is wrong), then `cuco resume`",
    faults.NODE_LOST: "check the nodes (`cuco nodes check CLUSTER`), then `cuco resume`",
    faults.SCHEDULER: "check the cluster's queue (`squeue`, `sacct`), then `cuco resume`",
    faults.TOOLCHAIN: "check the compiler and NCCL on the nodes (`cuco validate WORKLOAD`), then `cuco resume`",
    faults.GPU: "check the GPUs (`nvidia-smi`; a reset may be needed), then `cuco resume`",
    faults.HOST_OOM: "free memory on the host (or run fewer jobs at once: --concurrency), then `cuco resume`",
}


def pause_reason(fault: faults.Fault) -> str:
    todo = _WHAT_TO_DO.get(fault.kind, "fix the environment, then `cuco resume`")
    return f"paused itself ({fault.kind}): {fault.reason}. {todo}"


@dataclass(frozen=True)
class Decision:
    action: str  # RETRY | PAUSE | BLAME
    fault: faults.Fault
    delay_s: float = 0.0
    reason: str = ""


@dataclass
class FaultPolicy:
    max_retries: int = 3  # environment faults one candidate may meet before a verdict
    base_delay_s: float = 1.0
    max_delay_s: float = 30.0
    pause_after: int = 4  # environment faults in a row, any candidates, with no clean evaluation between
    _tries: dict[int, int] = field(default_factory=dict)
    _clean_at_first: dict[int, int] = field(default_factory=dict)
    _clean: int = 0
    _streak: int = 0

    def clean(self, candidate_id: int) -> None:
        """An evaluation ended without an environment fault: the environment works."""
        self._clean += 1
        self._streak = 0
        self._tries.pop(candidate_id, None)
        self._clean_at_first.pop(candidate_id, None)

    def decide(self, candidate_id: int, fault: faults.Fault) -> Decision:
        n = self._tries[candidate_id] = self._tries.get(candidate_id, 0) + 1
        others_clean = self._clean - self._clean_at_first.setdefault(candidate_id, self._clean)
        self._streak += 1
        if n > self.max_retries and others_clean > 0:
            self._tries.pop(candidate_id, None)
            self._clean_at_first.pop(candidate_id, None)
            return Decision(
                BLAME,
                fault,
                reason=(
                    f"{fault.reason} (met {n} times by this candidate alone while {others_clean} other evaluation(s) "
                    "ran cleanly: counted as its own failure)"
                ),
            )
        if n > self.max_retries or self._streak >= self.pause_after or (fault.persistent and self._streak >= 2):
            # The next faults after a resume start counting afresh.
            self._streak = 0
            self._tries.clear()
            self._clean_at_first.clear()
            return Decision(PAUSE, fault, reason=pause_reason(fault))
        delay = min(self.max_delay_s, self.base_delay_s * 2 ** (n - 1))
        return Decision(
            RETRY, fault, delay_s=delay, reason=f"{fault.reason}; retry {n} of {self.max_retries} in {delay:g} s"
        )


Attempt = Callable[[int], Awaitable[EvalOutcome]]
OnFault = Callable[[EvalOutcome, Decision], Awaitable[None]]


async def evaluate_with_retries(
    policy: FaultPolicy, candidate_id: int, attempt: Attempt, on_fault: OnFault
) -> EvalOutcome | None:
    """Run `attempt(n)` (n = 0, 1, ...) until its outcome is not the environment's fault. Returns the
    outcome to record (the candidate's verdict), or None when the run paused itself: the candidate was
    not evaluated and stays pending. `on_fault` is told of every environment fault and what was decided."""
    n = 0
    while True:
        try:
            outcome = await attempt(n)
        except Exception as exc:  # an executor's or the file system's error: never the candidate's
            fault = faults.of_exception(exc)
            outcome = EvalOutcome("failed", reason=fault.reason, feedback=fault.reason, fault=fault)
        if outcome.fault is None or not outcome.fault.environment:
            policy.clean(candidate_id)
            return outcome
        decision = policy.decide(candidate_id, outcome.fault)
        await on_fault(outcome, decision)
        if decision.action == BLAME:
            own = faults.candidate(outcome.fault.kind, decision.reason)
            return EvalOutcome(
                "failed",
                reason=decision.reason,
                feedback=f"{decision.reason}\n{outcome.feedback}",
                stages=outcome.stages,
                fault=own,
            )
        if decision.action == PAUSE:
            return None
        await asyncio.sleep(decision.delay_s)
        n += 1


def end_state(exc: BaseException) -> tuple[str, str]:
    """How a run ends on an error of its own (a write that failed): paused itself when the disk or the
    store is to blame (`cuco resume` continues once it is fixed), failed otherwise."""
    if faults.is_environment_error(exc):
        return "paused", pause_reason(faults.of_exception(exc))
    return "failed", f"engine error: {type(exc).__name__}: {exc}"


async def quietly(write: Awaitable[object]) -> None:
    """A write the run can end without (its last state, a log line) when the disk or the store is the
    trouble: the reason still reaches the user through the engine's own exit."""
    try:
        await write
    except Exception as exc:
        if not faults.is_environment_error(exc):
            raise
        log.warning("not written (%s)", exc)
