"""One line: run, workload, state, evaluations, best speedup, spend, busy nodes."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from engine.contract import RunSummary

STATE_STYLE = {
    "running": "bold green",
    "paused": "bold yellow",
    "stopped": "bold",
    "finished": "bold cyan",
    "failed": "bold red",
    "died": "bold red",
}


class RunHeader(Static):
    summary: reactive[RunSummary | None] = reactive(None, always_update=True)
    live: reactive[bool] = reactive(False)

    def render(self) -> Text:
        s = self.summary or RunSummary(run="?", workload="", state="")
        state = s.state or "?"
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f"{s.run}", style="bold")
        text.append(f" {s.workload} ")
        text.append(f"[{state}]", style=STATE_STYLE.get(state, "bold"))
        if not self.live:
            text.append(" read-only", style="italic")
        text.append(f"  evals {s.evaluated}")
        if s.failed:
            text.append(f" ({s.failed} bad)")
        best = s.best
        if best and best.speedup is not None:
            text.append("  best ")
            text.append(f"{best.speedup:.3f}x", style="bold green")
            text.append(f" #{best.candidate}")
        else:
            text.append("  best -")
        text.append(f"  ${float(s.llm_cost_usd or 0):.2f}")
        nodes = s.nodes
        busy = sum(1 for n in nodes if (n.get("running_jobs") or 0) > 0)
        text.append(f"  nodes {busy}/{len(nodes)} busy")
        return text
