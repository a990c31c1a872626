"""A candidate's timelines as a viewer reads them from the store: the figures and raw records per config,
or parsed (engine/timeline/timeline.py does the parsing; this is the query)."""

from __future__ import annotations

import json
import zlib
from typing import Any

from ..timeline.timeline import ConfigTimeline, TimelineError, parse


def load(store: Any, candidate_id: int) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """{config: (figures, raw records)} of one candidate, from a (read) store."""
    out = {}
    for row in store.fetchall(
        "SELECT config, figures_json, data FROM timelines WHERE candidate_id=? ORDER BY rowid", (candidate_id,)
    ):
        out[row["config"]] = (json.loads(row["figures_json"]), json.loads(zlib.decompress(row["data"])))
    return out


def load_parsed(store: Any, candidate_id: int) -> dict[str, ConfigTimeline | str]:
    """{config: its timeline, or why there is none}."""
    out: dict[str, ConfigTimeline | str] = {}
    for config, (_, raw) in load(store, candidate_id).items():
        try:
            out[config] = parse(config, raw)
        except TimelineError as exc:
            why = str(exc)
            out[config] = why if "no timeline" in why else f"no timeline: {why}"
    return out
