"""When a run stops on its own and what it says then: the configured limits (evaluations, minutes, target
speedup, patience), and why no parent can be chosen when none is left. Also the search's phase (explore, then
exploit), which the same limits pace."""

from __future__ import annotations

from collections.abc import Iterable

from ..config import RunConfig
from ..search.population import Cand
from ..store import counting
from ..store.schema import DONE, FINAL_STATUSES

UNBOUNDED_EXPLORE = 16  # evaluations explored first when the run has neither an evaluation nor a time limit


def stop_condition(
    config: RunConfig, evaluated: int, elapsed_s: float, best: Cand | None, since_best: int
) -> str | None:
    """The limit the run reached, in words, or None."""
    c = config
    if c.max_evals is not None and evaluated >= c.max_evals:
        return f"reached {c.max_evals} evaluations"
    if c.max_minutes is not None and elapsed_s >= c.max_minutes * 60:
        return f"reached {c.max_minutes:g} minutes"
    if c.target_speedup is not None and best is not None and (best.speedup or 0) >= c.target_speedup:
        return f"reached the target speedup {c.target_speedup:g}x"
    if c.patience is not None and since_best >= c.patience:
        return f"no new best in {c.patience} evaluations"
    return None


def why_no_parent(cands: Iterable[Cand]) -> str:
    """The stop reason when nothing is left to evolve from (every correct one rejected or held, or none)."""
    cands = list(cands)
    done = [c for c in cands if c.status == DONE]
    if done and all(c.verdict == "reject" for c in done):
        return "no candidate to evolve from (every correct candidate is rejected)"
    if done:
        held = sorted(c.id for c in done if c.review == counting.NEEDS_REVIEW and c.verdict != "reject")
        return (
            "no candidate to evolve from: every correct candidate is rejected or waits for review "
            f"({', '.join(f'#{i}' for i in held)}: `cuco accept` one to go on)"
        )
    seed = min(cands, key=lambda c: c.id, default=None)
    text = (seed.reason or "").strip() if seed is not None else ""
    why = f": {text.splitlines()[0][:200]}" if text else ""
    return f"no correct candidate to evolve from (the seed failed{why})"


def phase(config: RunConfig, evaluated: int, elapsed_s: float) -> str:
    """explore for the first `explore_fraction` of the run's evaluations (or minutes), exploit after."""
    if config.max_evals:
        return "explore" if evaluated < config.explore_fraction * config.max_evals else "exploit"
    if config.max_minutes:
        return "explore" if elapsed_s < config.explore_fraction * config.max_minutes * 60 else "exploit"
    return "explore" if evaluated < UNBOUNDED_EXPLORE else "exploit"


def final_state(stopped: bool, paused_itself: bool, statuses: set[str]) -> str:
    """How a run that left its loop ends: stopped (or paused, by itself), finished, or failed when it evaluated
    and not one candidate, the seed's included, was correct: nothing to search from."""
    if stopped:
        return "paused" if paused_itself else "stopped"
    return "failed" if statuses & set(FINAL_STATUSES) and DONE not in statuses else "finished"
