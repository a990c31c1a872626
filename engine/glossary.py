"""What each number on a screen means, with its unit: one line each, shared by `cuco report`, the TUI's
legends and its `?` screen, so that a number is explained the same way wherever it is shown."""

from __future__ import annotations

GLOSSARY: dict[str, str] = {
    "speedup": "x, higher is better: the geometric mean over the problem configs of baseline time / candidate "
    "time, each the median of A/B rounds taken side by side in one job; [low-high] is its 95 % interval. "
    "Candidates rank by the interval's low end (by the speedup where there is none).",
    "time": "ms: the candidate's time summed over the problem configs (per config: the median over iterations "
    "of the slowest rank). A sum weighs large configs more than the speedup does, so a faster sum can "
    "rank lower.",
    "baseline": "ms: the frozen baseline's time summed over the problem configs, measured in the same job as "
    "the candidate beside it (the run's baseline: in the seed's job).",
    "sum ratio": "x: baseline sum / candidate sum of one job; it differs from the speedup when configs gain unequally.",
    "bound": "x: the overlap bound (T_comp + T_comm) / max(T_comp, T_comm) of the baseline's compute-only and "
    "communication-only parts: the speedup a perfect overlap alone would give. A speedup above it "
    "while eff <= 1 means the baseline's whole time is longer than its two parts (launches, syncs).",
    "eff": "overlap efficiency (T_base - T_cand) / (T_base - max(T_comp, T_comm)): the share of the gain a "
    "perfect overlap could give that the candidate got. 1 is a perfect overlap; above 1 the candidate is "
    "faster than the baseline's compute or communication alone: a faster computation or a gamed "
    "measurement (clearly above: held for review).",
    "comp / comm": "ms: the baseline's compute-only and communication-only times for that config.",
    "evals": "candidates evaluated (correct + failed); 'bad' counts the failed and incorrect ones.",
    "review": "a verified result beyond the overlap bound, held for a person: it is not the best, a parent or "
    "an inspiration until accepted (v: the review queue).",
    "$": "USD: the LLM cost committed so far.",
    "nodes busy": "nodes running at least one job / nodes known (n: the nodes screen).",
    "size / trend": "an island's candidates, and the speedups of its newest 16 correct ones (low to high).",
    "+/- (lineage)": "x: the candidate's speedup minus its parent's.",
}


def legend(*keys: str) -> str:
    """One line per key: `key: meaning`."""
    return "\n".join(f"{k}: {GLOSSARY[k]}" for k in keys)
