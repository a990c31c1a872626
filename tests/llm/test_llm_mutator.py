"""The LLM mutator against a local OpenAI-compatible / Anthropic server: kinds, feedback on rejected
answers, novelty, budget, bandit state in the store, meta-summarizer, audit log."""

from __future__ import annotations

import json
import random

import pytest
from fake_llm import FakeLLMServer, Reply
from llm_helpers import add_candidate, context, demo_workload, knob_diff, open_store, outside_diff, preproc_diff, view

from engine import blocks
from engine.llm.audit import replay
from engine.llm.bandit import Bandit
from engine.llm.budget import BudgetExhausted
from engine.search.mutators.llm import LLMSettings, build_llm_mutator, choose_kind
from remote.errors import InputError


def full_answer(seed: str, old: str = "kStagger = 0", new: str = "kStagger = 1") -> str:
    body = blocks.block_bodies(seed)["schedule"].replace(old, new)
    return f"Rewrite.\n```cpp\n// EVOLVE-BLOCK-START schedule\n{body}// EVOLVE-BLOCK-END\n```\n"


def mutator(srv, tmp_path, w, *, budget=None, settings=None, models=None):
    return build_llm_mutator(
        models or [f"openai-compat:coder@{srv.url}/v1"],
        budget,
        w,
        home=tmp_path,
        settings=settings or LLMSettings(meta_every=0),
    )


async def test_valid_diff_becomes_a_proposal_with_its_call(llm_env, tmp_path):
    w = demo_workload()
    with FakeLLMServer([Reply(knob_diff(), input_tokens=1234, output_tokens=56)]) as srv:
        store = await open_store(tmp_path)
        m = mutator(srv, tmp_path, w)
        p = await m.propose(context(store, w, view(w.seed_source)))
        assert p is not None and p.operator == "llm-diff"
        assert p.mutator == f"llm:openai-compat:coder@{srv.url}/v1"
        assert blocks.knob_values(p.source)["chunk_rows"] == "16"
        assert "Smaller chunks" in p.note
        rows = await store.fetchall("SELECT * FROM llm_calls")
        assert [r["id"] for r in rows] == p.llm_call_ids and rows[0]["input_tokens"] == 1234
        prompt, answer = replay(store, rows[0])  # the audit log replays the call
        assert answer == knob_diff() and prompt["messages"][0]["content"] in srv.requests[0].prompt_text
        assert prompt["system"] == srv.requests[0].body["messages"][0]["content"]
        await m.close()
        await store.close()


@pytest.mark.parametrize(
    "bad,reason",
    [
        ("I would change the chunk size.", "no SEARCH/REPLACE"),
        (outside_diff(), "outside the EVOLVE-BLOCKs"),
        (preproc_diff(), "preprocessor line"),
    ],
)
async def test_rejected_answers_are_fed_back(llm_env, tmp_path, bad, reason):
    w = demo_workload()
    with FakeLLMServer([Reply(bad), Reply(knob_diff())]) as srv:
        store = await open_store(tmp_path)
        m = mutator(srv, tmp_path, w)
        p = await m.propose(context(store, w, view(w.seed_source)))
        assert p is not None and len(p.llm_call_ids) == 2
        second = srv.requests[1].body["messages"]
        assert second[-2] == {"role": "assistant", "content": bad}
        assert "rejected" in second[-1]["content"] and reason in second[-1]["content"]
        await m.close()
        await store.close()


async def test_attempts_are_bounded(llm_env, tmp_path):
    w = demo_workload()
    with FakeLLMServer(responder=lambda r: Reply("nonsense")) as srv:
        store = await open_store(tmp_path)
        m = mutator(srv, tmp_path, w)
        assert await m.propose(context(store, w, view(w.seed_source), feedback_attempts=2)) is None
        assert len(srv.requests) == 3
        await m.close()
        await store.close()


async def test_too_similar_children_are_asked_again(llm_env, tmp_path):
    w = demo_workload()
    seed = w.seed_source
    existing = blocks.set_knob(seed, "chunk_rows", "16")
    with FakeLLMServer([Reply(knob_diff("32", "16")), Reply(knob_diff("32", "64"))]) as srv:
        store = await open_store(tmp_path)
        m = mutator(srv, tmp_path, w)
        p = await m.propose(context(store, w, view(seed), island_sources=[seed, existing]))
        assert p is not None and blocks.knob_values(p.source)["chunk_rows"] == "64"
        assert "too similar" in srv.requests[1].body["messages"][-1]["content"]
        await m.close()
        await store.close()


async def test_full_rewrite_and_crossover(llm_env, tmp_path):
    w = demo_workload()
    seed = w.seed_source
    other = blocks.set_knob(seed, "chunk_rows", "8")
    explore = [
        choose_kind(context(None, w, view(seed), phase="explore", seed=s, second=view(other, cid=2)))[0]
        for s in range(60)
    ]
    assert {"diff", "full", "cross"} <= set(explore)
    assert "cross" not in {choose_kind(context(None, w, view(seed), seed=s))[0] for s in range(60)}
    assert (
        choose_kind(context(None, w, view(seed), phase="explore"))[1]
        > choose_kind(context(None, w, view(seed), phase="exploit"))[1]
    )
    seeds = {k: next(s for s in range(60) if explore[s] == k) for k in ("full", "cross")}
    with FakeLLMServer(responder=lambda r: Reply(full_answer(seed))) as srv:
        store = await open_store(tmp_path)
        m = mutator(srv, tmp_path, w)
        for kind, op in (("full", "llm-full"), ("cross", "llm-cross")):
            p = await m.propose(
                context(store, w, view(seed), phase="explore", seed=seeds[kind], second=view(other, cid=2))
            )
            assert p is not None and p.operator == op and blocks.knob_values(p.source)["stagger"] == "1"
        assert "Second parent" in srv.requests[-1].prompt_text
        await m.close()
        await store.close()


async def test_budget_stops_proposals(llm_env, tmp_path):
    w = demo_workload()
    (tmp_path / "pricing.yaml").write_text("openai-compat:\n  coder: {input: 0, output: 100}\n")
    with FakeLLMServer(responder=lambda r: Reply(knob_diff(), output_tokens=1000)) as srv:
        store = await open_store(tmp_path)
        # estimate per call: 4096 * 100 / 1e6 = 0.41 USD; each call costs 0.1 USD
        m = mutator(srv, tmp_path, w, budget=0.45)
        assert await m.propose(context(store, w, view(w.seed_source))) is not None
        with pytest.raises(BudgetExhausted):
            await m.propose(context(store, w, view(w.seed_source)))
        assert len(srv.requests) == 1
        # resumed: a new mutator reads what was spent from the store
        m2 = mutator(srv, tmp_path, w, budget=0.45)
        with pytest.raises(BudgetExhausted):
            await m2.propose(context(store, w, view(w.seed_source)))
        await m.close()
        await m2.close()
        await store.close()


async def test_bandit_state_round_trips_through_the_store(llm_env, tmp_path):
    w = demo_workload()
    with (
        FakeLLMServer(responder=lambda r: Reply(knob_diff(), output_tokens=10)) as a,
        FakeLLMServer(responder=lambda r: Reply(knob_diff(), output_tokens=10)) as b,
    ):
        models = [f"openai-compat:a@{a.url}/v1", f"openai-compat:b@{b.url}/v1"]
        store = await open_store(tmp_path)
        m = mutator(a, tmp_path, w, models=models)
        for s in range(2):
            await m.propose(context(store, w, view(w.seed_source), seed=s))
        assert len(a.requests) == 1 and len(b.requests) == 1  # untried arms first
        seed_id = await add_candidate(store, "run1", 0, w.seed_source, speedup=1.0)
        await add_candidate(store, "run1", 1, "child a", speedup=1.5, mutator=f"llm:{models[0]}", parent_id=seed_id)
        await add_candidate(
            store, "run1", 2, "child b", status="incorrect", speedup=None, mutator=f"llm:{models[1]}", parent_id=seed_id
        )
        await m.propose(context(store, w, view(w.seed_source), seed=5))
        row = await store.fetchone("SELECT value_json FROM run_state WHERE run_id='run1' AND key='bandit'")
        state = json.loads(row["value_json"])
        assert state["arms"][models[0]]["reward"] == pytest.approx(0.5)
        assert state["arms"][models[1]]["rewarded"] == 1 and len(state["credited"]) == 2
        restored = await Bandit.load(store, "run1", models)
        assert restored.to_json() == Bandit.from_json(row["value_json"], models).to_json()
        assert restored.scores()[models[0]] > restored.scores()[models[1]]
        picks = [restored.select(random.Random(s)) for s in range(5)]
        assert set(picks) == {models[0]}
        # the credited set keeps a resumed run from counting a child twice
        assert await restored.sync(store, "run1") == 0
        await m.close()
        await store.close()


async def test_meta_summarizer_every_n(llm_env, tmp_path):
    w = demo_workload()
    hidden = [c.name for c in w.configs if not c.public]

    def respond(req):
        if "review an evolutionary search" in req.prompt_text:
            return Reply('["Chunked overlap wins", "Avoid global barriers"]')
        return Reply(knob_diff())

    with FakeLLMServer(responder=respond) as srv:
        store = await open_store(tmp_path)
        for n in range(3):
            await add_candidate(
                store,
                "run1",
                n,
                f"src{n}",
                status="incorrect" if n == 2 else "done",
                speedup=None if n == 2 else 1.0 + n / 10,
                reason=f"verify: mismatch in config {hidden[0]} rank 1",
            )
        m = mutator(srv, tmp_path, w, settings=LLMSettings(meta_every=3))
        await m.propose(context(store, w, view(w.seed_source)))
        meta_req = [r for r in srv.requests if "review an evolutionary search" in r.prompt_text]
        assert len(meta_req) == 1 and hidden[0] not in meta_req[0].prompt_text
        row = await store.fetchone("SELECT value_json FROM run_state WHERE run_id='run1' AND key='recommendations'")
        assert json.loads(row["value_json"]) == ["Chunked overlap wins", "Avoid global barriers"]
        ev = await store.fetchone("SELECT data_json FROM events WHERE kind='recommendations'")
        assert json.loads(ev["data_json"])["items"][0] == "Chunked overlap wins"
        assert "Avoid global barriers" in srv.requests[-1].prompt_text  # the mutation prompt uses them
        calls = await store.fetchall("SELECT purpose FROM llm_calls ORDER BY id")
        assert [c["purpose"] for c in calls] == ["meta", "mutate"]
        await m.propose(context(store, w, view(w.seed_source)))  # not due again until 3 more
        assert len([r for r in srv.requests if "review an evolutionary search" in r.prompt_text]) == 1
        await m.close()
        await store.close()


async def test_anthropic_mutator(llm_env, tmp_path):
    w = demo_workload()
    with FakeLLMServer([Reply(knob_diff())]) as srv:
        llm_env.setenv("ANTHROPIC_BASE_URL", srv.url)
        store = await open_store(tmp_path)
        m = build_llm_mutator(["anthropic:claude-haiku-4-5"], 5.0, w, home=tmp_path, settings=LLMSettings(meta_every=0))
        p = await m.propose(context(store, w, view(w.seed_source)))
        assert p is not None and p.mutator == "llm:anthropic:claude-haiku-4-5"
        assert srv.paths() == ["/v1/messages"] and "system" in srv.requests[0].body
        row = await store.fetchone("SELECT cost_usd FROM llm_calls")
        assert row["cost_usd"] == pytest.approx((100 * 1 + 50 * 5) / 1e6)
        await m.close()
        await store.close()


def test_build_rejects_bad_models(llm_env, tmp_path):
    w = demo_workload()
    with pytest.raises(InputError) as e:
        build_llm_mutator(["nope"], None, w, home=tmp_path)
    assert e.value.field == "--llm"
    llm_env.delenv("OPENAI_API_KEY")
    with pytest.raises(InputError, match="OPENAI_API_KEY is not set"):
        build_llm_mutator(["openai:gpt-5"], None, w, home=tmp_path)
