"""One place every LLM call goes through: pick the client, hold the budget, retry, price, audit.

`LLMService.chat` reserves the call's estimated cost (BudgetExhausted if it does not fit), makes the
call with the retry policy, records it (blobs + `llm_calls`), settles the budget with the real cost and
returns the answer, or raises `LLMError` after recording the failure.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .audit import CallRecord, record_call
from .budget import Budget
from .clients import ChatClient, ChatRequest, ChatResult, estimate_tokens, make_client
from .errors import LLMError
from .models import ModelSpec
from .pricing import Pricing
from .retry import RetryPolicy, call_with_retries

if TYPE_CHECKING:
    from ..store.store import Store

log = logging.getLogger("cuco.llm")


def _cancelling() -> bool:
    """Whether the running task itself is being cancelled (not only a request it awaits)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


@dataclass
class CallOutcome:
    text: str
    call_id: int | None
    cost_usd: float
    result: ChatResult


class LLMService:
    def __init__(
        self,
        specs: list[ModelSpec],
        pricing: Pricing,
        budget: Budget,
        policy: RetryPolicy | None = None,
        *,
        client_factory: Callable[[ModelSpec], ChatClient] | None = None,
        rng: random.Random | None = None,
    ):
        self.specs = {s.name: s for s in specs}
        self.pricing = pricing
        self.budget = budget
        self.policy = policy or RetryPolicy()
        self._factory = client_factory or (lambda spec: make_client(spec, timeout_s=self.policy.timeout_s))
        self._clients: dict[str, ChatClient] = {}
        self.rng = rng or random.Random(0)
        self._calls: set[asyncio.Future] = set()  # requests in flight, for `cancel_calls`

    @property
    def model_names(self) -> list[str]:
        return list(self.specs)

    def client(self, model: str) -> ChatClient:
        if model not in self._clients:
            self._clients[model] = self._factory(self.specs[model])
        return self._clients[model]

    def estimate_usd(self, spec: ModelSpec, request: ChatRequest) -> float:
        return self.pricing.cost(spec, estimate_tokens(request.prompt_chars()), request.max_tokens)

    async def chat(
        self,
        model: str,
        request: ChatRequest,
        *,
        store: Store | None,
        run_id: str | None,
        purpose: str,
        candidate_id: int | None = None,
        shown: dict[str, object] | None = None,
    ) -> CallOutcome:
        """`shown` names what the prompt showed (candidate ids: the parent, the failures), kept with it in
        the audit log so a call can be read against what came of it."""
        spec = self.specs[model]
        await self.budget.load(store, run_id)
        token = self.budget.reserve(self.estimate_usd(spec, request))
        prompt = {
            "model": spec.name,
            "purpose": purpose,
            "system": request.system,
            "messages": request.messages,
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
        }
        if shown:
            prompt["shown"] = shown
        started = time.monotonic()
        client = self.client(model)

        def on_retry(n: int, err: LLMError, wait: float) -> None:
            log.warning("%s: attempt %d failed (%s); retrying in %.1f s", spec.name, n, err, wait)

        cost = 0.0
        call = asyncio.ensure_future(
            call_with_retries(
                lambda: client.chat(request, self.policy.timeout_s), self.policy, rng=self.rng, on_retry=on_retry
            )
        )
        self._calls.add(call)
        try:
            try:
                result = await call
            except asyncio.CancelledError:
                if not call.cancelled() or _cancelling():
                    call.cancel()
                    raise  # the caller itself is cancelled
                # `cancel_calls`: the request ends, the caller carries on with an error it handles
                raise LLMError(
                    "cancelled: the run stopped while the model was answering", kind="cancelled", retryable=False
                ) from None
            finally:
                self._calls.discard(call)
        except LLMError as err:
            if err.kind == "cancelled":
                await self._cancelled(spec, request, token, prompt, started, store, run_id, purpose, candidate_id)
                raise
            self.budget.settle(token, 0.0)
            if store is not None:
                await record_call(
                    store,
                    CallRecord(
                        run_id,
                        spec.name,
                        purpose,
                        "timeout" if err.kind == "timeout" else "error",
                        prompt,
                        None,
                        latency_s=time.monotonic() - started,
                        error=str(err),
                        candidate_id=candidate_id,
                    ),
                )
            raise
        except asyncio.CancelledError:
            await asyncio.shield(
                self._cancelled(spec, request, token, prompt, started, store, run_id, purpose, candidate_id)
            )
            raise
        except BaseException:
            self.budget.settle(token, 0.0)
            raise
        cost = self.pricing.cost(spec, result.input_tokens, result.output_tokens)
        self.budget.settle(token, cost)
        call_id = None
        if store is not None:
            call_id = await record_call(
                store,
                CallRecord(
                    run_id,
                    spec.name,
                    purpose,
                    "ok",
                    prompt,
                    result.text,
                    result.input_tokens,
                    result.output_tokens,
                    cost,
                    time.monotonic() - started,
                    candidate_id=candidate_id,
                ),
            )
        return CallOutcome(result.text, call_id, cost, result)

    def cancel_calls(self) -> None:
        """End every request in flight (a stop): each caller gets an `LLMError` of kind `cancelled`."""
        for call in list(self._calls):
            call.cancel()

    async def _cancelled(
        self,
        spec: ModelSpec,
        request: ChatRequest,
        token: int,
        prompt: dict,
        started: float,
        store: Store | None,
        run_id: str | None,
        purpose: str,
        candidate_id: int | None,
    ) -> None:
        """A call cut short: the prompt was sent, so its tokens are counted (estimated: the server never said)
        and the call is kept as `cancelled`."""
        sent = estimate_tokens(request.prompt_chars())
        spent = self.pricing.cost(spec, sent, 0)
        self.budget.settle(token, spent)
        if store is not None:
            record = CallRecord(
                run_id,
                spec.name,
                purpose,
                "cancelled",
                prompt,
                None,
                input_tokens=sent,
                cost_usd=spent,
                latency_s=time.monotonic() - started,
                error="cancelled: the run stopped while the model was answering",
                candidate_id=candidate_id,
            )
            await record_call(store, record)

    async def close(self) -> None:
        for c in self._clients.values():
            close = getattr(c, "close", None)
            if close is not None:
                try:
                    await close()
                except Exception:  # closing is best effort
                    pass
        self._clients.clear()

    async def embed(
        self, model: str, texts: list[str], *, store: Store | None, run_id: str | None
    ) -> list[list[float]]:
        """Embeddings from an OpenAI-compatible `/embeddings` endpoint, budgeted and audited like a chat."""
        spec = self.specs[model]
        client = self.client(model)
        embed = getattr(client, "embed", None)
        if embed is None:
            raise LLMError(
                f"{spec.name} offers no embeddings (use openai: or openai-compat:)", kind="client", retryable=False
            )
        await self.budget.load(store, run_id)
        token = self.budget.reserve(self.pricing.cost(spec, estimate_tokens(sum(map(len, texts))), 0))
        prompt = {"model": spec.name, "purpose": "embed", "input": texts}
        started = time.monotonic()
        try:
            vectors, tokens = await call_with_retries(
                lambda: embed(texts, self.policy.timeout_s), self.policy, rng=self.rng
            )
        except LLMError as err:
            self.budget.settle(token, 0.0)
            if store is not None:
                await record_call(
                    store,
                    CallRecord(
                        run_id,
                        spec.name,
                        "embed",
                        "timeout" if err.kind == "timeout" else "error",
                        prompt,
                        None,
                        latency_s=time.monotonic() - started,
                        error=str(err),
                    ),
                )
            raise
        except BaseException:
            self.budget.settle(token, 0.0)
            raise
        cost = self.pricing.cost(spec, tokens, 0)
        self.budget.settle(token, cost)
        if store is not None:
            dims = len(vectors[0]) if vectors else 0
            await record_call(
                store,
                CallRecord(
                    run_id,
                    spec.name,
                    "embed",
                    "ok",
                    prompt,
                    f"{len(vectors)} vectors of {dims} dimensions",
                    tokens,
                    0,
                    cost,
                    time.monotonic() - started,
                ),
            )
        return vectors
