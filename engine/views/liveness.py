"""Whether a run's stored state is still true: a row that says `running` with no engine serving it is a run
whose engine died (killed, the machine rebooted). Viewers show it as `died`, never as `running`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..daemon import protocol

DIED = "died"
START_GRACE_S = 3.0  # a new run's engine writes its row a moment before it serves its socket


def shown_state(home: Path, run: dict[str, Any]) -> str:
    """The state to show for a `runs` row: its own, or `died` when it says running and nothing serves it."""
    state = run.get("state") or "?"
    if state != "running" or protocol.live_run_info(Path(home), run["id"]) is not None:
        return state
    if time.time() - float(run.get("created_at") or 0) < START_GRACE_S:
        return state
    return DIED


def died_reason(run_id: str) -> str:
    return f"its engine died; restart it with: cuco resume {run_id}"
