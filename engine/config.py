"""A run's configuration: stop conditions, islands, selection, mutators. Stored with the run (JSON)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from remote.errors import InputError

SELECTIONS = ("weighted", "power_law")
MUTATORS = ("design-space", "llm")


@dataclass
class RunConfig:
    islands: int = 2
    seed: int = 0
    max_evals: int | None = 40
    max_minutes: float | None = None
    target_speedup: float | None = None
    patience: int | None = None              # stop after this many evaluations without a new best
    concurrency: int = 2                      # proposals/evaluations in flight
    migration_interval: int = 8               # evaluations between migrations
    migration_size: int = 1                   # elites copied along each edge of the ring
    explore_fraction: float = 0.4             # first part of the budget explores (more structural moves)
    parent_selection: str = "power_law"
    power_law_alpha: float = 1.5
    archive_inspirations: int = 2
    top_inspirations: int = 2
    llm: list[str] = field(default_factory=list)
    budget_usd: float | None = None
    mutator: str = "design-space"             # design-space | llm (llm needs --llm)
    cluster: str | None = None                # path of cluster.yaml; None = local executor
    reverify_best: bool = True                # a new best is re-measured on a fresh seed before it counts
    ranks: int | None = None                  # ranks (GPUs) per job; None = the workload's default

    def validate(self, source: str = "run config") -> "RunConfig":
        def bad(field_name: str, msg: str) -> InputError:
            return InputError(source, field_name, msg)
        if self.islands < 1:
            raise bad("islands", f"must be >= 1 (got {self.islands})")
        if self.max_evals is not None and self.max_evals < 1:
            raise bad("max_evals", f"must be >= 1 (got {self.max_evals})")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise bad("max_minutes", f"must be > 0 (got {self.max_minutes})")
        if self.target_speedup is not None and self.target_speedup <= 0:
            raise bad("target_speedup", f"must be > 0 (got {self.target_speedup})")
        if self.patience is not None and self.patience < 1:
            raise bad("patience", f"must be >= 1 (got {self.patience})")
        if self.concurrency < 1:
            raise bad("concurrency", f"must be >= 1 (got {self.concurrency})")
        if self.migration_interval < 1:
            raise bad("migration_interval", "must be >= 1")
        if not 0 <= self.explore_fraction <= 1:
            raise bad("explore_fraction", "must be between 0 and 1")
        if self.parent_selection not in SELECTIONS:
            raise bad("parent_selection", f"must be one of {', '.join(SELECTIONS)} (got {self.parent_selection!r})")
        if self.mutator not in MUTATORS:
            raise bad("mutator", f"must be one of {', '.join(MUTATORS)} (got {self.mutator!r})")
        if self.mutator == "llm" and not self.llm:
            raise bad("llm", "the llm mutator needs at least one model (--llm PROVIDER:MODEL)")
        if self.ranks is not None and self.ranks < 1:
            raise bad("ranks", f"must be >= 1 (got {self.ranks})")
        if self.budget_usd is not None and self.budget_usd < 0:
            raise bad("budget_usd", "must be >= 0")
        return self

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "run config") -> "RunConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise InputError(source, sorted(unknown)[0], f"unknown setting (known: {', '.join(sorted(known))})")
        return cls(**data).validate(source)

    @classmethod
    def from_json(cls, text: str) -> "RunConfig":
        return cls.from_dict(json.loads(text))

    def with_overrides(self, overrides: dict[str, Any], source: str = "fork overrides") -> "RunConfig":
        """Apply `key=value` overrides (strings are converted to the field's type)."""
        data = dataclasses.asdict(self)
        types = {f.name: f.type for f in dataclasses.fields(self)}
        for key, value in overrides.items():
            if key not in data:
                raise InputError(source, key, f"unknown setting (known: {', '.join(sorted(data))})")
            data[key] = _coerce(value, data[key], types[key], key, source)
        return RunConfig.from_dict(data, source)


def _coerce(value: Any, current: Any, type_text: Any, key: str, source: str) -> Any:
    if not isinstance(value, str):
        return value
    t = str(type_text)
    try:
        if value.lower() in ("none", "null", ""):
            if "None" in t:
                return None
        if t.startswith("list"):
            return [v for v in value.split(",") if v]
        if "bool" in t:
            return value.lower() in ("1", "true", "yes", "on")
        if "int" in t and "float" not in t:
            return int(value)
        if "float" in t:
            return float(value)
    except ValueError:
        raise InputError(source, key, f"cannot read {value!r} as {t}") from None
    return value
