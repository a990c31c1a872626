"""Read-side queries for two run-wide views: the candidates that win some problem config (per-config view)
and what the LLMs did and cost (LLM panel). Every function takes `fetch(sql, params) -> rows`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..contract import config_results
from ..llm import strategies as strat
from ..llm.bandit import STATE_KEY as BANDIT_KEY
from ..llm.bandit import Bandit
from ..store.counting import COUNTS_SQL

Fetch = Callable[[str, Any], list[dict[str, Any]]]

# The per-config results of a candidate that counts (engine/store/counting.py: as for the run's best, not rejected
# and not held for review): the benchmark stage's configs (the engine's shape), or a flat result's own. One
# pass over the run's counting candidates, in SQLite's JSON functions.
_PER_CONFIG = (
    "SELECT c.id, json_extract(j.value, '$.name') AS config, "
    "CAST(json_extract(j.value, '$.speedup') AS REAL) AS speedup "
    "FROM candidates c, json_each(COALESCE(json_extract(c.metrics_json, '$.benchmark.configs'), "
    "json_extract(c.metrics_json, '$.configs'))) j "
    f"WHERE c.run_id=? AND {COUNTS_SQL} AND c.metrics_json IS NOT NULL"
)


@dataclass
class ConfigWinners:
    configs: list[str]  # in the order the harness reports them
    winners: dict[str, int]  # config -> the candidate fastest on it
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per winning candidate, with per-config speedups


def config_winners(fetch: Fetch, run_id: str) -> ConfigWinners:
    """The candidates that are best on at least one config (the Pareto set over configs: none of them is
    beaten everywhere), with every config's speedup of each; ties go to the earlier candidate."""
    best = fetch(
        f"WITH per AS ({_PER_CONFIG}) SELECT config, id, MAX(speedup) AS speedup FROM "
        "(SELECT * FROM per WHERE speedup IS NOT NULL ORDER BY id) GROUP BY config",
        (run_id,),
    )
    if not best:
        return ConfigWinners([], {})
    winners = {r["config"]: r["id"] for r in best}
    ids = sorted(set(winners.values()))
    marks = ",".join("?" * len(ids))
    rows = fetch(
        f"SELECT id, generation, island, operator, mutator, speedup, metrics_json FROM candidates "
        f"WHERE id IN ({marks}) ORDER BY id",
        ids,
    )
    configs: list[str] = []
    out = []
    for row in rows:
        per = _per_config(row.pop("metrics_json"))
        for name in per:
            if name not in configs:
                configs.append(name)
        row["per_config"] = per
        row["wins"] = [c for c, cid in winners.items() if cid == row["id"]]
        out.append(row)
    return ConfigWinners(configs, winners, out)


def _per_config(metrics_json: str | None) -> dict[str, float]:
    try:
        metrics = json.loads(metrics_json or "{}")
    except ValueError:
        return {}
    return {c.name: float(c.speedup) for c in config_results(metrics) if c.speedup is not None}


@dataclass
class ModelStats:
    model: str
    calls: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    pulls: int = 0  # the bandit's: proposals that used this model
    rewarded: int = 0  # children of this model whose result was credited
    gain_per_usd: float | None = None  # the bandit's estimate: mean improvement per call / mean cost per call


@dataclass
class LlmPanel:
    models: list[ModelStats]
    spent_usd: float
    budget_usd: float | None
    advice: list[str]
    advice_at: int | None  # evaluations finished when the advice was made
    strategies: list[dict[str, Any]] = field(default_factory=list)  # engine/llm/strategies.py's rows


def llm_panel(fetch: Fetch, run_id: str) -> LlmPanel:
    stats: dict[str, ModelStats] = {}
    for r in fetch(
        "SELECT model, COUNT(*) AS calls, SUM(status != 'ok' AND status != 'in_flight') AS errors, "
        "SUM(input_tokens) AS tin, SUM(output_tokens) AS tout, SUM(cost_usd) AS cost "
        "FROM llm_calls WHERE run_id=? GROUP BY model ORDER BY model",
        (run_id,),
    ):
        stats[r["model"]] = ModelStats(
            r["model"],
            r["calls"],
            int(r["errors"] or 0),
            int(r["tin"] or 0),
            int(r["tout"] or 0),
            float(r["cost"] or 0.0),
        )
    state = {
        r["key"]: r["value_json"] for r in fetch("SELECT key, value_json FROM run_state WHERE run_id=?", (run_id,))
    }
    if BANDIT_KEY in state:
        try:
            bandit = Bandit.from_json(state[BANDIT_KEY], json.loads(state[BANDIT_KEY]).get("models") or [])
        except (ValueError, TypeError, KeyError):
            bandit = None
        for model, arm in bandit.arms.items() if bandit is not None else ():
            s = stats.setdefault(model, ModelStats(model))
            s.pulls, s.rewarded = arm.pulls, arm.rewarded
            value = bandit.value(model) if bandit is not None else math.nan
            s.gain_per_usd = value if arm.rewarded and math.isfinite(value) else None
    run = fetch("SELECT config_json FROM runs WHERE id=?", (run_id,))
    try:
        budget = json.loads(run[0]["config_json"]).get("budget_usd") if run else None
    except ValueError:
        budget = None
    advice, advice_at = _json_list(state.get("recommendations")), None
    try:
        advice_at = json.loads(state.get("meta") or "{}").get("at")
    except (ValueError, AttributeError):
        pass
    marks = fetch("SELECT id, verdict, strategy, text FROM strategy_marks WHERE run_id=? ORDER BY id", (run_id,))
    population = strat.effective(state.get(strat.STATE_KEY), marks)
    return LlmPanel(
        sorted(stats.values(), key=lambda s: s.model),
        sum(s.cost_usd for s in stats.values()),
        float(budget) if isinstance(budget, (int, float)) else None,
        advice,
        advice_at,
        population.rows() if population is not None else [],
    )


def _json_list(text: str | None) -> list[str]:
    try:
        items = json.loads(text or "[]")
    except ValueError:
        return []
    return [str(i) for i in items] if isinstance(items, list) else []
