"""What the TUI reads, in thread workers: the engine's read model (engine/views), and a candidate's
detail drawn as Rich `Text` in the calling thread, so the UI only has to place it. Filtering, sorting
and paging happen in the read model's SQL.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from rich.syntax import Syntax
from rich.text import Text

from engine.contract import (
    config_results,
    configs_from_benchmark,
    format_speedup,
    metrics_besides_configs,
    timeline_figures,
)
from engine.evaluation.efficiency import OVERLAP, judge
from engine.glossary import legend
from engine.views.filters import SORT_COLUMNS, FilterError, parse_filter
from engine.views.read_model import CANDIDATE_WINDOW, ReadModel

from .lineage_view import lineage_text

__all__ = ["CANDIDATE_WINDOW", "SORT_COLUMNS", "CandidateDetail", "FilterError", "StoreView", "parse_filter"]
SPARK = "▁▂▃▄▅▆▇█"
MAX_SOURCE_CHARS = 400_000


def _fault_note(ev: dict[str, Any]) -> str:
    try:
        data = json.loads(ev.get("result_json") or "{}")
    except ValueError:
        data = {}
    return f"{data.get('fault', '?')} ({data.get('action', 'retry')}): {data.get('reason', '')}"[:300]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class CandidateDetail:
    id: int
    title: str
    diff: Text
    source: Text
    source_text: str
    metrics: Text
    logs: Text
    llm: Text
    row: dict[str, Any] = field(default_factory=dict)
    lineage: Text = field(default_factory=Text)


class StoreView(ReadModel):
    """The read model (engine/views) and how the TUI draws a candidate: Rich text, computed in the
    calling thread worker, so the UI only places it."""

    # ---- one candidate (diff, source, metrics, logs, prompts)

    def detail(self, candidate_id: int, dark: bool = True) -> CandidateDetail | None:
        row = self.candidate(candidate_id)
        if row is None:
            return None
        theme = "monokai" if dark else "default"
        source = self.blob(row["source_hash"])
        source_text = source if source is not None else ""
        if source is None:
            source_view = Text("(source blob missing from the store)", style="italic")
        else:
            source_view = Syntax(source[:MAX_SOURCE_CHARS], "cuda", theme=theme, line_numbers=False).highlight(
                source[:MAX_SOURCE_CHARS]
            )
        diff_view = self._parent_diff(row, source_text, theme)
        title = (
            f"#{row['id']} island {row['island']} gen {row['generation']} {row['operator']} "
            f"({row['mutator']}) {row['status']}"
        )
        return CandidateDetail(
            id=row["id"],
            title=title,
            diff=diff_view,
            source=source_view,
            source_text=source_text,
            metrics=self._metrics(row),
            logs=self._logs(candidate_id),
            llm=self._llm(candidate_id),
            row=row,
            lineage=lineage_text(self._all, row["run_id"], candidate_id, self.best_paths),
        )

    def parent_diff(self, candidate_id: int, dark: bool = True) -> Text:
        """The candidate's diff against its parent (a fork's copy: against its original), highlighted."""
        row = self.candidate(candidate_id)
        if row is None:
            return Text(f"(no candidate #{candidate_id})", style="italic")
        return self._parent_diff(row, self.blob(row["source_hash"]) or "", "monokai" if dark else "default")

    def _parent_diff(self, row: dict[str, Any], source_text: str, theme: str) -> Text:
        parent = self.parent_source(row)
        if parent is None:
            return Text("(no parent: this is a seed)", style="italic")
        parent_id, parent_src = parent
        lines = list(
            difflib.unified_diff(
                parent_src.splitlines(), source_text.splitlines(), f"#{parent_id}", f"#{row['id']}", lineterm="", n=3
            )
        )
        diff_text = "\n".join(lines) or "(identical to its parent)"
        text = Syntax(diff_text, "diff", theme=theme).highlight(diff_text)
        mark_changed_spans(text, lines)
        text.no_wrap, text.overflow = False, "fold"  # wrapped: a long changed line shows its change
        return text

    def _metrics(self, row: dict[str, Any]) -> Text:
        out = Text()
        for key, label in (
            ("status", "status"),
            ("correct", "correct"),
            ("speedup", "speedup"),
            ("time_ms", "time"),
            ("baseline_ms", "baseline"),
            ("cell", "cell"),
            ("reason", "reason"),
            ("fault", "fault"),
        ):
            if row.get(key) is not None:
                out.append(f"{label:>9}: ", style="bold")
                out.append(f"{_shown(key, row)}\n")
        if _is_number(row.get("time_ms")) and _is_number(row.get("baseline_ms")) and row["time_ms"]:
            out.append(f"{'sum ratio':>9}: {row['baseline_ms'] / row['time_ms']:.3f}x (baseline / time, this job)\n")
        try:
            desc = json.loads(row.get("descriptor_json") or "{}")
        except ValueError:
            desc = {}
        if desc:
            out.append("\ndesign point\n", style="bold underline")
            for k, v in desc.items():
                out.append(f"  {k}: {v}\n")
        metrics = None
        try:
            metrics = json.loads(row["metrics_json"]) if row.get("metrics_json") else None
        except ValueError:
            out.append("\n(metrics are not valid JSON)\n")
        if not isinstance(metrics, dict):
            out.append("\n" + legend("speedup", "time", "baseline") + "\n", style="dim")
            return out
        for flag in metrics.get("flags") or []:
            out.append(
                f"\n⚑ beyond the overlap bound on {flag.get('config')}: {flag.get('candidate_ms'):.4g} ms < "
                f"{flag.get('bound_ms'):.4g} ms (the baseline's compute or communication alone). A faster "
                "computation or a gamed measurement: read the diff before trusting it.\n",
                style="bold yellow",
            )
        configs = config_results(metrics)
        if configs:
            # two short lines per config: the detail pane is narrow (about 40 columns at 100x30)
            out.append(
                "\nper config" + (" (benchmark)" if configs_from_benchmark(metrics) else "") + "\n",
                style="bold underline",
            )
            out.append("  name  baseline -> candidate ms  ratio\n", style="dim")
            for cfg in configs:
                out.append(f"  {cfg.name}", style="bold")
                base, cand, ratio = cfg.baseline_ms, cfg.candidate_ms, cfg.speedup
                if base is not None and cand is not None:
                    out.append(f"  {base:.4g} -> {cand:.4g} ms")
                if ratio is not None:
                    out.append(f"  {format_speedup(ratio, cfg.speedup_interval)}", style="bold")
                out.append("\n")
                parts = [
                    f"{label} {value:.4g} ms"
                    for value, label in ((cfg.comp_ms, "comp"), (cfg.comm_ms, "comm"))
                    if value is not None
                ]
                if cfg.bound is not None:
                    parts.append(f"bound {cfg.bound:.3f}x")
                if parts:
                    out.append("    " + "  ".join(parts) + "\n", style="dim")
                verdict = judge(cfg.as_dict(), timeline_figures(metrics, cfg.name))
                if verdict.kind is not None:  # 1: a perfect overlap of the baseline's own compute and communication
                    out.append(
                        f"    {'overlap efficiency ' if verdict.kind == OVERLAP else ''}{verdict.label_with_spread()}\n",
                        style="dim",
                    )
        rest = metrics_besides_configs(metrics)
        harness = harness_lines(rest)
        if harness:
            out.append("\nharness\n", style="bold underline")
            out.append(harness[:20000] + "\n")
        out.append(
            "\n" + legend("speedup", "time", "baseline", "sum ratio", "bound", "eff", "comp / comm") + "\n", style="dim"
        )
        return out

    def _logs(self, candidate_id: int) -> Text:
        out = Text()
        rows = self.evaluations(candidate_id)
        if not rows:
            return Text("(no build or run logs yet)", style="italic")
        for ev in rows:
            out.append(
                f"── {ev['stage']} [{ev['status']}] rc={ev['rc']} node={ev['node']} "
                f"{(ev['duration_s'] or 0):.1f}s attempt {ev['attempt']}\n",
                style="bold",
            )
            if ev.get("fault") == "environment":  # not held against the candidate (engine/evaluation/faults.py)
                out.append(f"   the environment's fault, not the candidate's: {_fault_note(ev)}\n", style="yellow")
            text = self.blob(ev["log_hash"])
            out.append((text[-20000:] if text else "(no log)") + "\n")
        return out

    def _llm(self, candidate_id: int) -> Text:
        rows = self.llm_calls(candidate_id)
        if not rows:
            return Text("(no LLM calls for this candidate)", style="italic")
        out = Text()
        for call in rows:
            out.append(
                f"── {call['model']} {call['purpose']} [{call['status']}] in {call['input_tokens']} "
                f"out {call['output_tokens']} ${call['cost_usd']:.4f}\n",
                style="bold",
            )
            for label, digest in (("prompt", call["prompt_hash"]), ("response", call["response_hash"])):
                text = self.blob(digest)
                if text:
                    out.append(f"{label}:\n", style="underline")
                    out.append(text[-20000:] + "\n")
            if call.get("error"):
                out.append(f"error: {call['error']}\n")
        return out


_UNITS = {
    "speedup": "x",
    "time_ms": " ms",
    "baseline_ms": " ms",
    "candidate_ms": " ms",
    "comp_ms": " ms",
    "comm_ms": " ms",
    "bound": "x",
    "duration_s": " s",
    "measurements": "x",
}


def _shown(key: str, row: dict[str, Any]) -> str:
    """A candidate's field as its detail shows it: the speedup with its interval, and whether it is a
    side-by-side re-measurement's."""
    if key != "speedup":
        return format_value(key, row[key])
    text = format_speedup(row[key], [row.get("speedup_low"), row.get("speedup_high")]) or "-"
    return text + (" (re-measured side by side)" if row.get("remeasured") else "")


def format_value(key: str, value: Any) -> str:
    """A number with 4 significant digits (3 decimals for a ratio) and its unit; anything else as text."""
    unit = _UNITS.get(key, "")
    if isinstance(value, bool) or not _is_number(value):
        return str(value)
    if unit == "x":
        return f"{value:.3f}x"
    return f"{value:.4g}{unit}"


def harness_lines(data: dict[str, Any], indent: int = 0) -> str:
    """The rest of the harness's result, one `key: value` line each, numbers formatted (not a JSON dump)."""
    pad = "  " * indent
    lines: list[str] = []
    for key, value in data.items():
        if isinstance(value, dict):
            if value:
                lines.append(f"{pad}{key}:")
                lines.append(harness_lines(value, indent + 1))
        elif isinstance(value, list) and all(_is_number(v) for v in value):
            lines.append(f"{pad}{key}: " + " ".join(format_value(key, v) for v in value))
        elif isinstance(value, list):
            lines.append(f"{pad}{key}: {len(value)} item(s)")
        elif isinstance(value, str) and "\n" in value:
            lines.append(f"{pad}{key}:")
            lines.extend(f"{pad}  {line}" for line in value.splitlines())
        else:
            lines.append(f"{pad}{key}: {format_value(key, value)}")
    return "\n".join(line for line in lines if line)


def mark_changed_spans(text: Text, lines: list[str]) -> None:
    """Underline the characters that changed inside a `-` line and the `+` line that replaced it, so two
    long lines that differ only in their middle look different."""
    offsets, pos = [], 0
    for line in lines:
        offsets.append(pos)
        pos += len(line) + 1
    i = 0
    while i < len(lines):
        if not (lines[i].startswith("-") and not lines[i].startswith("---")):
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].startswith("-") and not lines[j].startswith("---"):
            j += 1
        k = j
        while k < len(lines) and lines[k].startswith("+") and not lines[k].startswith("+++"):
            k += 1
        for old, new in zip(range(i, j), range(j, k)):
            matcher = difflib.SequenceMatcher(None, lines[old][1:], lines[new][1:], autojunk=False)
            for tag, a0, a1, b0, b1 in matcher.get_opcodes():
                if tag == "equal":
                    continue
                if a1 > a0:
                    text.stylize("bold reverse", offsets[old] + 1 + a0, offsets[old] + 1 + a1)
                if b1 > b0:
                    text.stylize("bold reverse", offsets[new] + 1 + b0, offsets[new] + 1 + b1)
        i = max(k, i + 1)


def sparkline(values: list[float], width: int = 12) -> str:
    values = values[-width:]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, int((v - lo) / span * (len(SPARK) - 1)))] for v in values)
