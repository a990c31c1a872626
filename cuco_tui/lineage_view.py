"""How the TUI draws a candidate's lineage (engine/views/lineage.py reads it): one line per node, and the
detail tab's chain from the seed."""

from __future__ import annotations

from rich.text import Text

from engine.views.lineage import BestPaths, Fetch, LineageNode, lineage


def node_label(node: LineageNode, focus: bool = False) -> Text:
    """One node: its id, generation, island, what made it, speedup and change, inspirations, migration."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if node.on_best_path:
        text.append("★ ", style="bold yellow")
    if focus:
        text.append("● ", style="bold")
    text.append(f"#{node.id}", style="bold" if node.on_best_path else "")
    text.append(f" g{node.generation} i{node.island} ", style="dim")
    text.append(node.edge, style="cyan")
    if node.speedup is not None:
        text.append(f" {node.speedup:.3f}x", style="bold green" if node.on_best_path else "green")
    else:
        text.append(f" {node.status}", style="red" if node.status in ("incorrect", "failed") else "dim")
    if node.delta is not None:
        text.append(f" {node.delta:+.3f}", style="green" if node.delta > 0 else ("red" if node.delta < 0 else "dim"))
    if node.inspirations:
        text.append(" insp " + " ".join(f"#{i}" for i in node.inspirations[:4]), style="magenta")
    if node.migrated:
        text.append(f" migrated {node.migrated}", style="blue")
    if node.children:
        text.append(f" ({node.children} children)", style="dim")
    return text


def lineage_text(fetch: Fetch, run_id: str, candidate_id: int, best_paths: BestPaths, shown: int = 40) -> Text:
    """The detail tab's view: the chain from the seed, one line per generation (the newest `shown`)."""
    data = lineage(fetch, run_id, candidate_id, best_paths, limit=shown)
    out = Text()
    if data.best is not None:
        out.append(
            f"★ on the path from the seed to the best (#{data.best}); L opens the lineage screen\n\n", style="dim"
        )
    if not data.complete and data.chain:
        out.append("… older ancestors back to generation 0 (L shows them)\n", style="dim")
    for node in data.chain[-shown:]:
        out.append("└ ")
        out.append_text(node_label(node, focus=node.id == data.focus))
        out.append("\n")
    if data.children:
        out.append(
            f"\nchildren ({data.chain[-1].children if data.chain else len(data.children)})\n", style="bold underline"
        )
        for node in data.children[:20]:
            out.append("  ")
            out.append_text(node_label(node))
            out.append("\n")
    return out
