"""The official SDKs against local servers speaking the Anthropic and OpenAI wire protocols."""

from __future__ import annotations

import time

import pytest
from fake_llm import FakeLLMServer, Reply
from llm_helpers import SECRET, open_store

from engine.llm.budget import Budget, BudgetExhausted
from engine.llm.clients import ChatRequest
from engine.llm.errors import LLMError
from engine.llm.models import parse_model
from engine.llm.pricing import Pricing
from engine.llm.retry import RetryPolicy
from engine.llm.service import LLMService

REQ = ChatRequest("system text", [{"role": "user", "content": "hello"}], 0.5, 256)


def service(models, tmp_path, *, budget=None, policy=None):
    specs = [parse_model(m) for m in models]
    return LLMService(
        specs,
        Pricing.load(tmp_path),
        Budget(budget),
        policy or RetryPolicy(timeout_s=2, max_attempts=3, base_delay_s=0.01),
    )


async def test_anthropic_and_openai_through_base_urls(llm_env, tmp_path):
    with FakeLLMServer(
        [
            Reply("from claude", input_tokens=1000, output_tokens=100),
            Reply("from gpt", input_tokens=2000, output_tokens=10),
        ]
    ) as srv:
        llm_env.setenv("ANTHROPIC_BASE_URL", srv.url)
        llm_env.setenv("OPENAI_BASE_URL", srv.url + "/v1")
        store = await open_store(tmp_path)
        svc = service(["anthropic:claude-sonnet-4-5", "openai:gpt-5"], tmp_path)
        a = await svc.chat("anthropic:claude-sonnet-4-5", REQ, store=store, run_id="run1", purpose="mutate")
        o = await svc.chat("openai:gpt-5", REQ, store=store, run_id="run1", purpose="mutate")
        assert (a.text, o.text) == ("from claude", "from gpt")
        assert a.cost_usd == pytest.approx((1000 * 3 + 100 * 15) / 1e6)
        assert o.cost_usd == pytest.approx((2000 * 1.25 + 10 * 10) / 1e6)
        assert srv.paths() == ["/v1/messages", "/v1/chat/completions"]
        body = srv.requests[1].body
        assert body["messages"][0] == {"role": "system", "content": "system text"}
        assert body.get("max_completion_tokens") == 256 and "temperature" not in body  # reasoning model
        rows = await store.fetchall("SELECT * FROM llm_calls ORDER BY id")
        assert [(r["model"], r["status"], r["input_tokens"]) for r in rows] == [
            ("anthropic:claude-sonnet-4-5", "ok", 1000),
            ("openai:gpt-5", "ok", 2000),
        ]
        assert svc.budget.spent_usd == pytest.approx(a.cost_usd + o.cost_usd)
        await svc.close()
        await store.close()


async def test_compat_server_429_retry_after_then_500_then_ok(llm_env, tmp_path):
    with FakeLLMServer(
        [Reply(status=429, headers={"retry-after": "0.3"}), Reply(status=500), Reply("finally", usage=False)]
    ) as srv:
        store = await open_store(tmp_path)
        svc = service([f"openai-compat:coder@{srv.url}/v1"], tmp_path)
        started = time.monotonic()
        out = await svc.chat(f"openai-compat:coder@{srv.url}/v1", REQ, store=store, run_id="run1", purpose="mutate")
        assert out.text == "finally" and time.monotonic() - started >= 0.3
        assert len(srv.requests) == 3
        assert out.cost_usd == 0 and out.result.output_tokens > 0  # no usage: estimated, local: free
        assert srv.requests[0].body["max_tokens"] == 256 and srv.requests[0].body["temperature"] == 0.5
        await svc.close()
        await store.close()


async def test_timeouts_and_bounded_attempts_are_recorded(llm_env, tmp_path):
    with FakeLLMServer([Reply("late", delay_s=1.5), Reply(status=503), Reply(status=500)]) as srv:
        llm_env.setenv("ANTHROPIC_BASE_URL", srv.url)
        store = await open_store(tmp_path)
        svc = service(
            ["anthropic:claude-haiku-4-5"],
            tmp_path,
            policy=RetryPolicy(timeout_s=0.5, max_attempts=3, base_delay_s=0.01),
        )
        with pytest.raises(LLMError) as e:
            await svc.chat("anthropic:claude-haiku-4-5", REQ, store=store, run_id="run1", purpose="mutate")
        assert e.value.status == 500 and len(srv.requests) == 3
        row = await store.fetchone("SELECT * FROM llm_calls")
        assert row["status"] == "error" and row["cost_usd"] == 0 and SECRET not in (row["error"] or "")
        assert svc.budget.committed_usd == 0
        await svc.close()
        await store.close()


async def test_client_errors_are_not_retried(llm_env, tmp_path):
    with FakeLLMServer([Reply(status=401), Reply("never")]) as srv:
        llm_env.setenv("ANTHROPIC_BASE_URL", srv.url)
        svc = service(["anthropic:claude-haiku-4-5"], tmp_path)
        with pytest.raises(LLMError) as e:
            await svc.chat("anthropic:claude-haiku-4-5", REQ, store=None, run_id=None, purpose="mutate")
        assert e.value.status == 401 and "check the key variable" in str(e.value)
        assert len(srv.requests) == 1
        await svc.close()


async def test_budget_counts_spent_and_in_flight(llm_env, tmp_path):
    (tmp_path / "pricing.yaml").write_text("openai-compat:\n  coder: {input: 100, output: 1000}\n")
    with FakeLLMServer(responder=lambda r: Reply("ok", input_tokens=100, output_tokens=100)) as srv:
        store = await open_store(tmp_path)
        model = f"openai-compat:coder@{srv.url}/v1"
        # one call: estimate ~ (prompt/4 * 100 + 256 * 1000) / 1e6 = 0.256 USD; real cost 0.11 USD
        svc = service([model], tmp_path, budget=0.45)
        first = await svc.chat(model, REQ, store=store, run_id="run1", purpose="mutate")
        assert first.cost_usd == pytest.approx(0.11)
        token = svc.budget.reserve(0.1)  # a call in flight elsewhere
        assert svc.budget.committed_usd == pytest.approx(0.21)
        with pytest.raises(BudgetExhausted):  # 0.21 + 0.3 > 0.45
            svc.budget.reserve(0.3)
        svc.budget.settle(token, 0.0)
        await svc.chat(model, REQ, store=store, run_id="run1", purpose="mutate")
        with pytest.raises(BudgetExhausted):
            await svc.chat(model, REQ, store=store, run_id="run1", purpose="mutate")
        assert len(srv.requests) == 2
        # a resumed run counts what the store says it spent
        again = service([model], tmp_path, budget=0.45)
        await again.budget.load(store, "run1")
        assert again.budget.spent_usd == pytest.approx(0.22)
        await svc.close()
        await again.close()
        await store.close()


async def test_embeddings_endpoint(llm_env, tmp_path):
    from engine.llm.novelty import EmbeddingNovelty

    with FakeLLMServer() as srv:
        model = f"openai-compat:embedder@{srv.url}/v1"
        svc = service([model], tmp_path)
        store = await open_store(tmp_path)
        check = EmbeddingNovelty(lambda texts: svc.embed(model, texts, store=store, run_id="run1"))
        assert await check.max_similarity(
            "// EVOLVE-BLOCK-START\nabc\n// EVOLVE-BLOCK-END\n", ["// EVOLVE-BLOCK-START\ncab\n// EVOLVE-BLOCK-END\n"]
        ) == pytest.approx(1.0)
        assert await check.max_similarity("aaaa", ["zzzz"]) == pytest.approx(0.0)
        assert srv.paths()[0] == "/v1/embeddings"
        rows = await store.fetchall("SELECT purpose FROM llm_calls")
        assert {r["purpose"] for r in rows} == {"embed"}
        await svc.close()
        await store.close()
