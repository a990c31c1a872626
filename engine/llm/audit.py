"""The audit log: every call's prompt and answer kept as blobs, referenced by an `llm_calls` row
(model, purpose, tokens, cost, latency, status). Texts pass through `redact` first: no key is ever kept."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..contract import LlmCall
from .keys import redact

if TYPE_CHECKING:
    from ..store.store import Store


@dataclass
class CallRecord:
    run_id: str | None
    model: str
    purpose: str  # mutate | meta | judge | transform | embed
    status: str  # ok | error | timeout | cancelled
    prompt: dict[str, Any]  # what was sent (system, messages, parameters)
    response: str | None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float | None = None
    error: str | None = None
    candidate_id: int | None = None


def prompt_text(prompt: dict[str, Any]) -> str:
    return redact(json.dumps(prompt, indent=1, sort_keys=True, ensure_ascii=False))


async def record_call(store: Store, rec: CallRecord) -> int:
    """Write the blobs and the `llm_calls` row (with an `llm_call` event); returns the row id."""
    prompt_hash = store.blobs.put_text(prompt_text(rec.prompt))
    response_hash = store.blobs.put_text(redact(rec.response)) if rec.response is not None else None
    error = redact(rec.error)[:2000] if rec.error else None
    async with store.transaction() as tx:
        call_id = await tx.insert(
            "INSERT INTO llm_calls (run_id, candidate_id, model, purpose, status, input_tokens, output_tokens, "
            "cost_usd, latency_s, prompt_hash, response_hash, error, at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                rec.run_id,
                rec.candidate_id,
                rec.model,
                rec.purpose,
                rec.status,
                rec.input_tokens,
                rec.output_tokens,
                rec.cost_usd,
                rec.latency_s,
                prompt_hash,
                response_hash,
                error,
                time.time(),
            ),
        )
        await tx.event(
            rec.run_id,
            LlmCall(
                id=call_id,
                model=rec.model,
                purpose=rec.purpose,
                status=rec.status,
                cost_usd=round(rec.cost_usd, 6),
                tokens=rec.input_tokens + rec.output_tokens,
            ),
        )
    return call_id


def replay(store: Store, call_row: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The prompt (as sent) and the answer of a recorded call."""
    prompt = json.loads(store.blobs.get_text(call_row["prompt_hash"]))
    answer = store.blobs.get_text(call_row["response_hash"]) if call_row.get("response_hash") else None
    return prompt, answer
