"""Model strings, pricing, diffs and block rewrites, prompts (no hidden config), novelty, retry policy."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest
from llm_helpers import demo_workload, knob_diff, outside_diff, preproc_diff, view

from engine import blocks
from engine.llm.edits import EditError, apply_blocks_answer, apply_diff, check_child, parse_diff
from engine.llm.errors import LLMError
from engine.llm.keys import REDACTED, redact, scrub_env
from engine.llm.models import parse_model, parse_models
from engine.llm.novelty import ShingleNovelty
from engine.llm.pricing import Pricing
from engine.llm.prompts import mutate_prompt, system_prompt
from engine.llm.retry import RetryPolicy, call_with_retries
from remote.errors import InputError

# ---- model strings


def test_model_strings():
    a = parse_model("anthropic:claude-sonnet-4-5")
    assert (a.provider, a.model, a.base_url) == ("anthropic", "claude-sonnet-4-5", None)
    o = parse_model("openai:gpt-5")
    assert o.name == "openai:gpt-5"
    c = parse_model("openai-compat:qwen2.5-coder:7b@http://127.0.0.1:8000/v1/")
    assert (c.model, c.base_url) == ("qwen2.5-coder:7b", "http://127.0.0.1:8000/v1")
    assert c.name == "openai-compat:qwen2.5-coder:7b@http://127.0.0.1:8000/v1"


@pytest.mark.parametrize(
    "text",
    [
        "gpt-5",
        "bogus:model",
        "openai-compat:m",
        "anthropic:",
        "openai-compat:m@http://user:pw@host/v1",
        "openai-compat:m@http://h/v1?key=x",
        "anthropic:claude@http://x",
    ],
)
def test_bad_model_strings_are_input_errors(text):
    with pytest.raises(InputError) as e:
        parse_model(text)
    assert e.value.field == "--llm" and e.value.file == "--llm"


def test_missing_key_names_the_variable_not_a_value(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(InputError) as e:
        parse_models(["anthropic:claude-sonnet-4-5"])
    assert "ANTHROPIC_API_KEY" in str(e.value)
    assert parse_models(["openai-compat:m@http://127.0.0.1:1/v1"])  # local servers need no key


def test_redact_and_scrub_env(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-abcdefghijkl")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-123456789")
    assert "sk-ant-abcdefghijkl" not in redact("x sk-ant-abcdefghijkl y tok-123456789")
    assert REDACTED in redact("key sk-other-zzzzzzzzzzzz")
    env = scrub_env({"ANTHROPIC_API_KEY": "x", "OPENAI_API_KEY": "y", "PATH": "/bin", "HF_TOKEN": "z"})
    assert env == {"PATH": "/bin"}
    assert "sk-ant" not in str(LLMError("echo sk-ant-abcdefghijkl", kind="client", retryable=False))


# ---- pricing


def test_pricing_shipped_prefix_override_unknown(tmp_path, caplog):
    p = Pricing.load(tmp_path)
    assert p.cost(parse_model("anthropic:claude-sonnet-4-5"), 1_000_000, 0) == pytest.approx(3.0)
    assert p.cost(parse_model("anthropic:claude-sonnet-4-5-20250929"), 0, 1_000_000) == pytest.approx(15.0)
    assert p.cost(parse_model("openai-compat:m@http://127.0.0.1:1/v1"), 10**6, 10**6) == 0
    with caplog.at_level(logging.WARNING):
        assert p.cost(parse_model("openai:mystery-model"), 10**6, 10**6) == 0
    assert "mystery-model" in caplog.text
    (tmp_path / "pricing.yaml").write_text(
        "anthropic:\n  claude-sonnet-4-5: {input: 1, output: 2}\nopenai-compat:\n  m: {input: 10, output: 20}\n"
    )
    p = Pricing.load(tmp_path)
    assert p.cost(parse_model("anthropic:claude-sonnet-4-5"), 10**6, 10**6) == pytest.approx(3.0)
    assert p.cost(parse_model("openai-compat:m@http://127.0.0.1:1/v1"), 10**6, 0) == pytest.approx(10.0)
    assert p.cost(parse_model("openai:gpt-5"), 10**6, 0) == pytest.approx(1.25)  # shipped entries stay
    (tmp_path / "pricing.yaml").write_text("openai:\n  gpt-5: {input: -1}\n")
    with pytest.raises(InputError) as e:
        Pricing.load(tmp_path)
    assert e.value.field == "openai.gpt-5.input"


# ---- edits


def test_diff_applies_inside_block():
    seed = demo_workload().seed_source
    child = apply_diff(seed, parse_diff(knob_diff()))
    check_child(seed, child)
    assert blocks.knob_values(child)["chunk_rows"] == "16"


def test_diff_tolerates_trailing_whitespace_and_indentation():
    seed = demo_workload().seed_source
    answer = (
        "<<<<<<< SEARCH\n  for (int s = 0; s < p->ranks; ++s) {   \n=======\n"
        "  for (int s = p->ranks - 1; s >= 0; --s) {\n>>>>>>> REPLACE"
    )
    child = apply_diff(seed, parse_diff(answer))
    check_child(seed, child)
    assert "--s" in child


@pytest.mark.parametrize(
    "answer,needle",
    [
        ("no edit here", "no SEARCH/REPLACE"),
        ("<<<<<<< SEARCH\nfoo\n>>>>>>> REPLACE", "malformed"),
        ("<<<<<<< SEARCH\nthis line is not there\n=======\nx\n>>>>>>> REPLACE", "does not match"),
        ("<<<<<<< SEARCH\n  }\n=======\n}\n>>>>>>> REPLACE", "matches"),
    ],
)
def test_bad_diffs_are_explained(answer, needle):
    seed = demo_workload().seed_source
    with pytest.raises(EditError) as e:
        apply_diff(seed, parse_diff(answer))
    assert needle in str(e.value)


def test_edits_outside_blocks_and_preprocessor_lines_are_rejected():
    seed = demo_workload().seed_source
    with pytest.raises(EditError, match="outside"):
        check_child(seed, apply_diff(seed, parse_diff(outside_diff())))
    with pytest.raises(EditError, match="preprocessor"):
        check_child(seed, apply_diff(seed, parse_diff(preproc_diff())))
    with pytest.raises(EditError, match="changes nothing"):
        check_child(seed, seed)


def test_full_block_rewrite():
    seed = demo_workload().seed_source
    body = blocks.block_bodies(seed)["schedule"].replace("kStagger = 0", "kStagger = 1")
    answer = f"Stagger peers.\n```cpp\n// EVOLVE-BLOCK-START schedule\n{body}// EVOLVE-BLOCK-END\n```\n"
    child = apply_blocks_answer(seed, answer)
    check_child(seed, child)
    assert blocks.knob_values(child)["stagger"] == "1"
    with pytest.raises(EditError, match="does not have"):
        apply_blocks_answer(seed, "```\n// EVOLVE-BLOCK-START other\nx\n// EVOLVE-BLOCK-END\n```")
    with pytest.raises(EditError, match="no block"):
        apply_blocks_answer(seed, "```cpp\nint x;\n```")


# ---- prompts


def test_prompts_hold_no_hidden_config():
    w = demo_workload()
    hidden = [c for c in w.configs if not c.public]
    assert hidden, "the demo must have hidden configs for this test to mean something"
    parent = view(
        w.seed_source,
        feedback=f"verify: mismatch in config {hidden[0].name} rank 1 index 7",
        public_metrics={c.name: {"speedup": 1.1} for c in w.configs},
    )
    rejected = view(w.seed_source, cid=9, reject_reason=f"cheats on {hidden[1].name}")
    texts = [
        system_prompt(w, "2x H100 NVLink"),
        mutate_prompt("diff", parent, w, rejected=[rejected], recommendations=[f"try {hidden[0].name}"]),
        mutate_prompt("full", parent, w),
        mutate_prompt("cross", parent, w, second=view(w.seed_source, cid=3)),
    ]
    for text in texts:
        for c in hidden:
            assert c.name not in text.replace(w.seed_source, "")
            assert f'"M": {c.params["M"]}' not in text
    for c in w.public_configs:
        assert c.name in texts[0]
    assert "2x H100 NVLink" in texts[0] and "chunk_rows" in texts[0]
    assert "cheats on" in texts[1] and "Rejected by the operator" in texts[1]
    assert "SEARCH" in texts[1] and "EVOLVE-BLOCK-START <name>" in texts[2] and "Second parent" in texts[3]


# ---- novelty


async def test_shingle_novelty():
    w = demo_workload()
    seed = w.seed_source
    check = ShingleNovelty(0.99)
    comment_only = seed.replace("// Host-driven: compute", "// Host driven, computes")
    assert await check.max_similarity(comment_only, [seed]) == 1.0
    child = apply_diff(seed, parse_diff(knob_diff()))
    sim = await check.max_similarity(child, [seed])
    assert 0.9 < sim < 0.99
    assert await check.max_similarity(child, []) == 0.0


# ---- retries


async def test_retry_policy_is_bounded_and_honours_retry_after():
    calls, waits = [], []

    async def sleep(s):
        waits.append(s)

    async def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise LLMError("slow down", kind="rate", retryable=True, status=429, retry_after=7)
        if len(calls) == 2:
            raise LLMError("oops", kind="server", retryable=True, status=500)
        return "ok"

    policy = RetryPolicy(timeout_s=1, max_attempts=4, base_delay_s=0.5, max_retry_after_s=5)
    assert await call_with_retries(flaky, policy, sleep=sleep, rng=random.Random(0)) == "ok"
    assert waits[0] == 5 and 0.5 <= waits[1] <= 1.0

    async def always_500():
        calls.append(1)
        raise LLMError("down", kind="server", retryable=True, status=500)

    calls.clear()
    with pytest.raises(LLMError):
        await call_with_retries(always_500, policy, sleep=sleep)
    assert len(calls) == 4

    async def bad_request():
        calls.append(1)
        raise LLMError("bad", kind="client", retryable=False, status=400)

    calls.clear()
    with pytest.raises(LLMError):
        await call_with_retries(bad_request, policy, sleep=sleep)
    assert len(calls) == 1

    async def hangs():
        await asyncio.sleep(10)

    with pytest.raises(LLMError) as e:
        await call_with_retries(hangs, RetryPolicy(timeout_s=0.05, max_attempts=2), sleep=sleep)
    assert e.value.kind == "timeout"
