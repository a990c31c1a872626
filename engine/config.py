"""A run's configuration: stop conditions, islands, selection, mutators. Stored with the run (JSON)."""

from __future__ import annotations

import dataclasses
import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from remote.errors import InputError
from remote.textfiles import read_text

SELECTIONS = ("weighted", "power_law")
MUTATORS = ("design-space", "llm")


@dataclass
class RunConfig:
    islands: int = 2
    seed: int = 0
    max_evals: int | None = 40
    max_minutes: float | None = None
    target_speedup: float | None = None
    patience: int | None = None  # stop after this many evaluations without a new best
    concurrency: int = 2  # proposals/evaluations in flight
    migration_interval: int = 8  # evaluations between migrations
    migration_size: int = 1  # elites copied along each edge of the ring
    explore_fraction: float = 0.4  # first part of the budget explores (more structural moves)
    parent_selection: str = "power_law"
    power_law_alpha: float = 1.5
    archive_inspirations: int = 2
    top_inspirations: int = 2
    llm: list[str] = field(default_factory=list)
    budget_usd: float | None = None
    mutator: str = "design-space"  # design-space | llm (llm needs --llm)
    cluster: str | None = None  # path of cluster.yaml; None = local executor
    reverify_best: bool = True  # a new best is re-measured on a fresh seed before it counts
    ranks: int | None = None  # ranks (GPUs) per job; None = the workload's default
    # The LLM mutator's settings (ignored by the design-space mutator).
    meta_every: int = 10  # finished evaluations between meta-summaries (0: off)
    novelty_threshold: float = 0.99  # token-shingle Jaccard above which a proposal is a near-copy
    embedding: str | None = None  # an openai:/openai-compat: embedding model: novelty by cosine
    embedding_threshold: float = 0.995  # cosine above which a proposal is a near-copy
    llm_timeout_s: float = 180.0  # one LLM request
    llm_max_attempts: int = 4  # per request, with backoff on 429 / 5xx / timeouts
    max_tokens_diff: int = 4096
    max_tokens_full: int = 8192
    # The strategy population (engine/llm/strategies.py): texts to start from (none: seeded from the
    # workload), the bandit's exploration, failures in a row that retire one, rewrites per meta step.
    strategies: list[str] = field(default_factory=list)
    strategy_exploration: float = 0.5
    strategy_retire_after: int = 3
    strategy_rewrites: int = 1
    repair_rate: float | None = None  # the repair operator's weight among the kinds (none: the schedule's)

    def validate(self, source: str = "run config") -> RunConfig:
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
        if self.migration_size < 0:
            raise bad("migration_size", f"must be >= 0 (got {self.migration_size})")
        if self.power_law_alpha <= 0:
            raise bad("power_law_alpha", f"must be > 0 (got {self.power_law_alpha})")
        for name in ("archive_inspirations", "top_inspirations"):
            if getattr(self, name) < 0:
                raise bad(name, f"must be >= 0 (got {getattr(self, name)})")
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
        if self.meta_every < 0:
            raise bad("meta_every", f"must be >= 0 (0 turns the meta-summarizer off; got {self.meta_every})")
        for name in ("novelty_threshold", "embedding_threshold"):
            if not 0 < getattr(self, name) <= 1:
                raise bad(name, f"must be in (0, 1] (got {getattr(self, name)})")
        if self.embedding is not None and not self.embedding.startswith(("openai:", "openai-compat:")):
            raise bad("embedding", f"must be an openai: or openai-compat: model (got {self.embedding!r})")
        if self.llm_timeout_s <= 0:
            raise bad("llm_timeout_s", f"must be > 0 (got {self.llm_timeout_s})")
        if self.repair_rate is not None and self.repair_rate < 0:
            raise bad("repair_rate", f"must be >= 0 (0 turns repairs off; got {self.repair_rate})")
        if self.strategy_exploration < 0:
            raise bad("strategy_exploration", f"must be >= 0 (got {self.strategy_exploration})")
        for name in ("strategy_retire_after", "strategy_rewrites"):
            if getattr(self, name) < 0:
                raise bad(name, f"must be >= 0 (0 turns it off; got {getattr(self, name)})")
        if any(not s.strip() for s in self.strategies):
            raise bad("strategies", "a strategy must be a non-empty text")
        for name in ("llm_max_attempts", "max_tokens_diff", "max_tokens_full"):
            if getattr(self, name) < 1:
                raise bad(name, f"must be >= 1 (got {getattr(self, name)})")
        return self

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "run config") -> RunConfig:
        types = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        for key in sorted(data):
            if key not in types:
                raise InputError(source, key, _unknown(key, types))
            _check_type(data[key], types[key], key, source)
        return cls(**data).validate(source)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        return cls.from_dict(json.loads(text))

    def with_overrides(self, overrides: dict[str, Any], source: str = "fork overrides") -> RunConfig:
        """Apply `key=value` overrides (strings are converted to the field's type)."""
        data = dataclasses.asdict(self)
        types = {f.name: f.type for f in dataclasses.fields(self)}
        for key, value in overrides.items():
            if key not in data:
                raise InputError(source, key, _unknown(key, data))
            data[key] = _coerce(value, data[key], types[key], key, source)
        return RunConfig.from_dict(data, source)


def _unknown(key: str, known) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown setting; {hint}known: {', '.join(sorted(known))}"


_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "str": "a string",
    "list[str]": "a list of strings",
}


def _check_type(value: Any, type_text: str, key: str, source: str) -> None:
    """A value read from JSON or YAML must have its field's type: `islands: two` is an error, not a crash."""
    base = type_text.replace(" | None", "")
    if value is None:
        if "None" in type_text:
            return
        ok = False
    elif base == "bool":
        ok = isinstance(value, bool)
    elif base == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif base == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif base == "str":
        ok = isinstance(value, str)
    elif base == "list[str]":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    else:
        ok = True
    if not ok:
        want = _TYPE_WORDS.get(base, base) + (" or null" if "None" in type_text else "")
        raise InputError(source, key, f"must be {want} (got {value!r})")


def load_config_file(path: Path) -> dict[str, Any]:
    """A run config file (YAML): a mapping of RunConfig settings (`max_evals: 80`, `meta_every: 5`, ...).
    Dashes in names are read as underscores; a relative `cluster:` path is relative to the file."""
    source = str(path)
    try:
        data = yaml.safe_load(read_text(path, "--config"))  # unreadable or not UTF-8: an InputError
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise InputError(source, "--config", f"not valid YAML{where}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(source, "--config", "must be a mapping of settings (e.g. `max_evals: 80`)")
    out = {str(k).replace("-", "_"): v for k, v in data.items()}
    if isinstance(out.get("llm"), str):
        out["llm"] = [out["llm"]]
    if isinstance(out.get("cluster"), str):
        cluster = (path.parent / Path(out["cluster"]).expanduser()).resolve()
        if not cluster.is_file():
            raise InputError(source, "cluster", f"no such file: {cluster}")
        out["cluster"] = str(cluster)
    if out.get("llm") and "mutator" not in out:
        out["mutator"] = "llm"
    return out


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
