"""A candidate as a mutator and its prompts may see it: public numbers only (no hidden configs). Built by the
run from its population, read by the mutators (engine/search/mutators/) and the LLM prompts (engine/llm/).
Standard library only, so every floor can import it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class CandidateView:
    """A candidate as a mutator may see it: public numbers only (no hidden configs)."""

    id: int
    source: str
    descriptor: dict[str, str]
    status: str
    island: int
    generation: int
    operator: str
    speedup: float | None = None
    time_ms: float | None = None
    speedup_interval: list[float] | None = None  # the 95 % interval of the speedup, when measured
    public_metrics: dict[str, Any] = field(default_factory=dict)  # per public config
    feedback: str = ""  # trimmed compile error / mismatch summary / timeout reason
    reject_reason: str = ""  # the operator's reason, for rejected candidates
    timeline: dict[str, Any] = field(default_factory=dict)  # per config: engine/timeline/timeline.py's figures
    reason: str = ""  # a failed candidate's one-line reason (its `feedback` then holds the whole log)
    changes: str = ""  # a failed candidate's diff against its parent
