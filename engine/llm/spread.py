"""A measured speedup's spread, read from a candidate's metrics for the prompts: `speedup_interval: [low, high]`
(the 95 % interval) on the result and on each per-config result. Results measured before intervals existed
have none; readers show the bare number then."""

from __future__ import annotations

from typing import Any


def _interval(value: Any) -> list[float] | None:
    if (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)
    ):
        return [float(value[0]), float(value[1])]
    return None


def speedup_interval(metrics: dict[str, Any], config: str | None = None) -> list[float] | None:
    """The interval of the whole result (config None) or of one config's, wherever the result keeps it (the
    benchmark stage's dict, or the metrics themselves)."""
    stages = [m for m in (metrics.get("benchmark"), metrics) if isinstance(m, dict)]
    for stage in stages:
        if config is None:
            found = _interval(stage.get("speedup_interval"))
        else:
            found = next(
                (
                    _interval(c.get("speedup_interval"))
                    for c in stage.get("configs") or []
                    if isinstance(c, dict) and c.get("name") == config
                ),
                None,
            )
        if found is not None:
            return found
    return None
