"""One line: run, workload, state, evaluations, best speedup, spend, busy nodes."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

STATE_STYLE = {"running": "bold green", "paused": "bold yellow", "stopped": "bold", "finished": "bold cyan",
               "failed": "bold red", "died": "bold red"}


class RunHeader(Static):
    summary: reactive[dict[str, Any]] = reactive(dict, always_update=True)
    live: reactive[bool] = reactive(False)

    def render(self) -> Text:
        s = self.summary or {}
        state = s.get("state", "?")
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f"{s.get('run', '?')}", style="bold")
        text.append(f" {s.get('workload', '')} ")
        text.append(f"[{state}]", style=STATE_STYLE.get(state, "bold"))
        if not self.live:
            text.append(" read-only", style="italic")
        text.append(f"  evals {s.get('evaluated', 0)}")
        failed = s.get("failed", 0)
        if failed:
            text.append(f" ({failed} bad)")
        best = s.get("best")
        if best and best.get("speedup") is not None:
            cid = best.get("candidate", best.get("id"))
            text.append("  best ")
            text.append(f"{best['speedup']:.3f}x", style="bold green")
            text.append(f" #{cid}")
        else:
            text.append("  best -")
        text.append(f"  ${float(s.get('llm_cost_usd') or 0):.2f}")
        nodes = s.get("nodes") or []
        busy = sum(1 for n in nodes if (n.get("running_jobs") or 0) > 0)
        text.append(f"  nodes {busy}/{len(nodes)} busy")
        return text
