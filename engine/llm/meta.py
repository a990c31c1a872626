"""The meta-summarizer: every N finished evaluations of a run, an LLM distils what worked and what failed
into a few recommendations, kept per run (`run_state` key `recommendations`, a JSON list of strings)
and announced with a `recommendations` event. Only public facts are shown to it."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from ..contract import Recommendations
from ..store.counting import COUNTS_SQL
from ..timeline.timeline import prompt_summary
from .clients import ChatRequest
from .prompts import scrub, trim

if TYPE_CHECKING:
    from ..store.store import Store
    from ..workload import Workload
    from .service import LLMService

STATE_KEY = "recommendations"
PROGRESS_KEY = "meta"  # {"at": finished evaluations when the last summary was made}
MAX_ITEMS = 8
FINAL = ("done", "incorrect", "failed", "refused")

SYSTEM = (
    "You review an evolutionary search that optimises a multi-GPU program. From the results below, "
    "write at most 8 short, concrete recommendations for the next mutations: what worked (keep doing), "
    "what failed and why (avoid). Answer with a JSON list of strings and nothing else."
)


async def finished_count(store: Store, run_id: str) -> int:
    row = await store.fetchone(
        f"SELECT COUNT(*) AS n FROM candidates WHERE run_id=? AND status IN ({','.join('?' * len(FINAL))})",
        (run_id, *FINAL),
    )
    return int(row["n"]) if row else 0


async def load_recommendations(store: Store, run_id: str) -> list[str]:
    row = await store.fetchone("SELECT value_json FROM run_state WHERE run_id=? AND key=?", (run_id, STATE_KEY))
    if row is None:
        return []
    try:
        items = json.loads(row["value_json"])
    except ValueError:
        return []
    return [str(x) for x in items] if isinstance(items, list) else []


async def _last_at(store: Store, run_id: str) -> int:
    row = await store.fetchone("SELECT value_json FROM run_state WHERE run_id=? AND key=?", (run_id, PROGRESS_KEY))
    try:
        return int(json.loads(row["value_json"]).get("at", 0)) if row else 0
    except (ValueError, AttributeError):
        return 0


def parse_items(answer: str) -> list[str]:
    """A JSON list of strings, or else bullet / numbered lines."""
    m = re.search(r"\[.*\]", answer, re.DOTALL)
    if m:
        try:
            items = json.loads(m.group(0))
            if isinstance(items, list):
                return [str(x).strip() for x in items if str(x).strip()][:MAX_ITEMS]
        except ValueError:
            pass
    items = []
    for line in answer.splitlines():
        line = re.sub(r"^\s*(?:[-*•]|\d+[.)])\s+", "", line).strip()
        if line and not line.startswith(("```", "#")):
            items.append(line)
    return items[:MAX_ITEMS]


async def summary_prompt(store: Store, run_id: str, workload: Workload, previous: list[str]) -> str:
    # Held for review or rejected by the operator: not a result to learn from (engine/store/counting.py).
    best = await store.fetchall(
        f"SELECT c.id, c.operator, c.descriptor_json, c.speedup FROM candidates c WHERE c.run_id=? AND {COUNTS_SQL} "
        "ORDER BY c.speedup DESC LIMIT 8",
        (run_id,),
    )
    bad = await store.fetchall(
        "SELECT id, operator, descriptor_json, status, reason FROM candidates WHERE run_id=? "
        "AND status IN ('incorrect','failed','refused') ORDER BY id DESC LIMIT 8",
        (run_id,),
    )
    recent = await store.fetchall(
        "SELECT c.id, c.operator, c.descriptor_json, c.status, c.speedup FROM candidates c WHERE c.run_id=? "
        f"AND (c.status IN ('incorrect','failed','refused') OR {COUNTS_SQL}) ORDER BY c.id DESC LIMIT 12",
        (run_id,),
    )

    def point(r: dict) -> str:
        try:
            return " ".join(f"{k}={v}" for k, v in sorted(json.loads(r["descriptor_json"]).items()))
        except (ValueError, AttributeError):
            return ""

    parts = [f"Workload: {workload.name}. {workload.description}".strip()]
    parts.append(
        "Best correct programs (speedup over the baseline):\n"
        + "\n".join(
            f"- #{r['id']} {r['operator']} [{point(r)}]: {r['speedup']:.3f}x" for r in best if r["speedup"] is not None
        )
        if best
        else "No correct program beyond the seed yet."
    )
    if bad:
        parts.append(
            "Recent failures:\n"
            + "\n".join(
                f"- #{r['id']} {r['operator']} [{point(r)}] {r['status']}: {trim(r['reason'] or '', 300)}" for r in bad
            )
        )
    if recent:
        parts.append(
            "Latest evaluations:\n"
            + "\n".join(
                f"- #{r['id']} {r['operator']} [{point(r)}] {r['status']}"
                + (f" {r['speedup']:.3f}x" if r["speedup"] is not None else "")
                for r in recent
            )
        )
    if best:
        timeline = await best_timeline(store, best[0]["id"], workload)
        if timeline:
            parts.append(
                f"Where the best program's time goes (#{best[0]['id']}, per problem size and rank):\n" + timeline
            )
    if previous:
        parts.append("Your previous recommendations:\n" + "\n".join(f"- {p}" for p in previous))
    return scrub("\n\n".join(parts), workload)


async def best_timeline(store: Store, candidate_id: int, workload: Workload) -> str:
    """The timeline figures of one candidate, public sizes only (hidden ones are not even named)."""
    rows = await store.fetchall("SELECT config, figures_json FROM timelines WHERE candidate_id=?", (candidate_id,))
    figs = {}
    for r in rows:
        try:
            figs[r["config"]] = json.loads(r["figures_json"])
        except ValueError:
            continue
    return trim(prompt_summary(figs, public={c.name for c in workload.public_configs}), 1500)


class MetaSummarizer:
    def __init__(self, every: int = 10, max_tokens: int = 1024):
        self.every = every
        self.max_tokens = max_tokens

    async def due(self, store: Store, run_id: str) -> int | None:
        """The finished count when a summary is due, else None."""
        if self.every <= 0:
            return None
        n = await finished_count(store, run_id)
        return n if n >= self.every and n - await _last_at(store, run_id) >= self.every else None

    async def summarize(
        self, service: LLMService, model: str, store: Store, run_id: str, workload: Workload, at: int
    ) -> list[str]:
        previous = await load_recommendations(store, run_id)
        prompt = await summary_prompt(store, run_id, workload, previous)
        out = await service.chat(
            model,
            ChatRequest(SYSTEM, [{"role": "user", "content": prompt}], temperature=0.3, max_tokens=self.max_tokens),
            store=store,
            run_id=run_id,
            purpose="meta",
        )
        items = [scrub(i, workload) for i in parse_items(out.text)] or previous
        async with store.transaction() as tx:
            await tx.execute(
                "INSERT OR REPLACE INTO run_state (run_id, key, value_json) VALUES (?,?,?)",
                (run_id, STATE_KEY, json.dumps(items)),
            )
            await tx.execute(
                "INSERT OR REPLACE INTO run_state (run_id, key, value_json) VALUES (?,?,?)",
                (run_id, PROGRESS_KEY, json.dumps({"at": at})),
            )
            await tx.event(run_id, Recommendations(items=items, at=at, llm_call=out.call_id))
        return items
