"""The strategy population end to end: the real engine with the LLM mutator, an OpenAI-compatible test
server whose answers succeed only under one strategy, and a synthetic executor that judges a child by its
source (so 30 evaluations take seconds, not 30 C++ builds).

The scripted model grows the `chunk_rows` knob (always correct and faster than its parent) when the prompt
carries the good strategy, and sets the `stagger` knob (always incorrect) under any other strategy.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import re
from collections import Counter

import pytest
from fake_llm import FakeLLMServer, Reply

from engine.config import RunConfig
from engine.llm import strategies as strat
from engine.run import control
from engine.store.store import ReadStore, Store
from engine.views.report import build_report
from engine.workload import load_workload
from tests.engine.synthetic import SyntheticExecutor

engine_mod = pytest.importorskip("engine.run.engine")

GOOD = "Grow the chunks: larger copies amortise the per-put cost."
BAD = ["Stagger the ranks so their copies do not collide.", "Offset the start of every rank's sends."]
HIDDEN = ("odd", "sliver")  # the demo's hidden configs (workloads/demo/workload.yaml)
CHUNK_RE = re.compile(r"static const int kChunkRows = (\d+);  // cuco:knob chunk_rows")
STAGGER = "static const int kStagger = 0;  // cuco:knob stagger"
STRATEGY_RE = re.compile(r"# Strategy for this change\n(.*)\n")


def judge(source: str) -> tuple[bool, float]:
    """Correct unless the stagger knob moved; faster the larger the chunks."""
    chunk = int(CHUNK_RE.search(source).group(1))
    return STAGGER in source, 1.0 + chunk / 1000.0


def edit_answer(prompt: str, old: str, new: str) -> str:
    if "Answer with the new text of every EVOLVE-BLOCK" in prompt:  # a full rewrite or a crossover
        source = prompt.split("# Parent program", 1)[1].split("```\n", 1)[1]
        block = source[source.index("// EVOLVE-BLOCK-START") : source.index("// EVOLVE-BLOCK-END")]
        return f"Done.\n```cpp\n{block.replace(old, new)}// EVOLVE-BLOCK-END\n```\n"
    return f"Done.\n<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE\n"


class ScriptedModel:
    """Answers mutations by the strategy in the prompt; records which strategy each mutation carried."""

    def __init__(self) -> None:
        self.counter = itertools.count(1)
        self.carried: list[str | None] = []
        self.rewrites = 0

    def __call__(self, req) -> Reply:
        text = req.prompt_text
        if "review an evolutionary search" in text:
            return Reply('["Keep the chunks large"]')
        if "You maintain the strategies" in text:
            self.rewrites += 1
            return Reply(json.dumps([f"Rewritten idea {self.rewrites}.{i}: reorder the sends." for i in range(4)]))
        m = STRATEGY_RE.search(text)
        self.carried.append(m.group(1) if m else None)
        parent = text.split("# Parent program", 1)[1]
        n = next(self.counter)
        if m and m.group(1) == GOOD:
            old = CHUNK_RE.search(parent).group(0)
            chunk = int(CHUNK_RE.search(parent).group(1))
            return Reply(edit_answer(text, old, old.replace(f"= {chunk};", f"= {chunk + n};")))
        return Reply(edit_answer(text, STAGGER, STAGGER.replace("= 0;", f"= {n};")))


def config(model: str, max_evals: int = 30, seed: int = 0) -> RunConfig:
    return RunConfig(
        seed=seed,
        max_evals=max_evals,
        concurrency=1,
        islands=1,
        llm=[model],
        mutator="llm",
        meta_every=5,
        novelty_threshold=1.0,
        strategies=[GOOD, *BAD],
        strategy_retire_after=2,
        strategy_exploration=0.7,
        reverify_best=False,
        repair_rate=0.0,  # every prompt is a strategy's: no repairs of the failed children
    )


def population(home, run_id: str) -> strat.Population:
    rs = ReadStore(home)
    try:
        row = rs.fetchone("SELECT value_json FROM run_state WHERE run_id=? AND key='strategies'", (run_id,))
        return strat.Population.from_json(row["value_json"])
    finally:
        rs.close()


async def run_until(engine, home, run_id: str, finished: int) -> None:
    """Run `engine` until `finished` evaluations are final, then stop it (a user's stop)."""
    task = asyncio.create_task(engine.run())
    rs = ReadStore(home)
    try:
        for _ in range(600):
            n = rs.fetchone(
                "SELECT COUNT(*) AS n FROM candidates WHERE run_id=? AND status IN "
                "('done','incorrect','failed','refused')",
                (run_id,),
            )["n"]
            if n >= finished or task.done():
                break
            await asyncio.sleep(0.05)
    finally:
        rs.close()
    await engine.stop()
    assert await asyncio.wait_for(task, 60) in ("stopped", "finished")


@pytest.mark.parametrize("protocol", ["openai-compat", "anthropic"])
async def test_the_strategy_that_works_takes_over_and_the_failing_ones_retire(llm_env, tmp_path, protocol):
    model_answers = ScriptedModel()
    run_id = "strat-1"
    with FakeLLMServer(responder=model_answers) as srv:
        if protocol == "anthropic":  # the official SDK, pointed at the test server
            llm_env.setenv("ANTHROPIC_BASE_URL", srv.url)
            model = "anthropic:claude-haiku-4-5"
        else:
            model = f"openai-compat:coder@{srv.url}/v1"
        # first half, then a stop and a resume: the population must carry over
        engine = await engine_mod.Engine.create(
            tmp_path,
            load_workload("demo"),
            config(model),
            run_id=run_id,
            executor=SyntheticExecutor(slots=1, judge=judge),
        )
        await run_until(engine, tmp_path, run_id, 14)
        await engine.close()
        before = population(tmp_path, run_id)
        assert before.get("s1").text == GOOD and before.get("s1").successes >= 1

        engine = await engine_mod.Engine.load(tmp_path, run_id, executor=SyntheticExecutor(slots=1, judge=judge))
        assert await asyncio.wait_for(engine.run(), 120) == "finished"
        await engine.close()
        requests = list(srv.requests)
    assert {r.path for r in requests} == {"/v1/messages" if protocol == "anthropic" else "/v1/chat/completions"}

    after = population(tmp_path, run_id)
    for s in before.strategies:  # resumed, not reseeded: every strategy is still there and kept its record
        kept = after.get(s.id)
        assert kept is not None and kept.text == s.text
        assert kept.pulls >= s.pulls and kept.children >= s.children
    assert after.credited >= before.credited

    carried = model_answers.carried
    assert len(carried) >= 25 and all(carried), "every mutation prompt carries a strategy"
    # the strategy each request carried is the one the population counted for it
    assert Counter(carried) == Counter({s.text: s.pulls for s in after.strategies if s.pulls})
    share = carried.count(GOOD) / len(carried)
    assert share > 0.5, f"the working strategy got {share:.0%} of {len(carried)} mutations"
    good = after.get("s1")
    assert good.active and good.successes >= 10 and good.failures == 0
    retired = [s for s in after.strategies if s.status == strat.RETIRED]
    assert {s.text for s in retired} >= set(BAD), after.rows()
    assert all(s.successes == 0 and "children failed" in s.why for s in retired)
    rewritten = [s for s in after.strategies if s.origin.startswith("meta: replaced")]
    assert rewritten and model_answers.rewrites >= 1

    # the prompts: the chosen strategy in, hidden config names out (system, mutations, meta and rewrites)
    for req in requests:
        text = json.dumps(req.body)
        for name in HIDDEN:
            assert not re.search(rf"(?<![A-Za-z0-9_]){name}(?![A-Za-z0-9_])", text), (name, text[:2000])
    rs = ReadStore(tmp_path)
    purposes = [r["purpose"] for r in rs.fetchall("SELECT purpose FROM llm_calls WHERE run_id=?", (run_id,))]
    report = build_report(rs, run_id)
    rs.close()
    assert "strategies" in purposes and "meta" in purposes
    rows = {r["id"]: r for r in report["strategies"]}
    assert rows["s1"]["text"] == GOOD and rows["s1"]["successes"] == good.successes
    assert rows["s1"]["share"] > 0.5 and rows["s1"]["mean_gain"] > 0
    assert report["strategies"][0]["id"] == "s1"  # active and best first

    # a fork inherits the population; --set edits it (recorded as the new run's marks)
    store = await Store(tmp_path).open()
    try:
        fork = await control.fork(
            store,
            run_id,
            name="strat-fork",
            overrides={"strategy.add": ["Fuse the copy into the compute loop."], "strategy.pin": "s1", "islands": "1"},
        )
        with pytest.raises(control.InputError, match="no strategy 's99'"):
            await control.fork(store, run_id, name="strat-bad", overrides={"strategy.retire": "s99"})
    finally:
        await store.close()
    rs = ReadStore(tmp_path)
    forked = {r["id"]: r for r in build_report(rs, fork)["strategies"]}
    rs.close()
    assert forked["s1"]["pinned"] and forked["s1"]["successes"] == good.successes
    assert {r["text"] for r in forked.values()} == {s.text for s in after.strategies} | {
        "Fuse the copy into the compute loop."
    }
    assert all(forked[s.id]["status"] == s.status for s in retired)


def test_population_rules():
    pop = strat.Population(exploration=0.5)
    a, b, c = (pop.add(t, "config") for t in ("A", "B", "C"))
    rng = random.Random(0)
    first = {pop.select(rng).id for _ in range(1)}
    assert first <= {"s1", "s2", "s3"}
    for s in (a, b, c):
        pop.pulled(s)
    # a's children are faster, b's fail, c's are correct but not faster
    for cid, (s, status, reward) in enumerate(
        [(a, "done", 0.2), (b, "incorrect", 0.0), (b, "failed", 0.0), (c, "done", 0.0), (c, "done", 0.0)]
    ):
        assert pop.credit(cid, s.id, status, reward, reason=f"mismatch in odd {cid}")
    assert not pop.credit(0, "s1", "done", 0.2)  # credited once
    assert a.successes == 1 and a.mean_gain == pytest.approx(0.2)
    assert [s.id for s in pop.failing(2)] == ["s2"] and pop.failing(3) == []
    assert [s.id for s in pop.weakest(1, 2)] == ["s2"]  # no gain in 2 children; a has only 1 child
    assert max(pop.scores(), key=pop.scores().get) == "s1"
    # operator marks, folded in order; a pinned strategy is the only one picked
    pop.fold(
        [
            {"id": 1, "verdict": "pin", "strategy": "s3", "text": ""},
            {"id": 2, "verdict": "retire", "strategy": "s1", "text": "too risky"},
            {"id": 3, "verdict": "add", "strategy": None, "text": "Use  sk-ant-SECRET-0123456789abcdef now"},
        ]
    )
    assert {pop.select(random.Random(s)).id for s in range(10)} == {"s3"}
    assert a.status == strat.RETIRED and "too risky" in a.why
    added = pop.get("s4")
    assert added is not None and added.origin == "operator" and "SECRET" not in added.text
    assert pop.fold([{"id": 2, "verdict": "pin", "strategy": "s1", "text": ""}]) == 0  # seen already
    assert pop.failing(1) == [b]  # pinned c never retires, retired a is out
    again = strat.Population.from_json(pop.to_json())
    assert again.to_json() == pop.to_json()


def test_seed_strategies_come_from_the_design_space_and_name_no_hidden_config():
    w = load_workload("demo")
    texts = strat.seed_texts(w)
    assert 3 <= len(texts) <= strat.MAX_SEEDS
    assert any("placement" in t for t in texts) and any("chunked_push" in t or "fused" in t for t in texts)
    for t in texts:
        assert not any(re.search(rf"\b{h}\b", t) for h in HIDDEN)


async def test_prompts_carry_the_strategy_scrubbed_and_redacted(llm_env, tmp_path):
    from llm_helpers import SECRET, context, demo_workload, knob_diff, open_store, view

    from engine.search.mutators.llm import LLMSettings, build_llm_mutator

    w = demo_workload()
    risky = f"Specialise the chunks for odd and sliver, and call home with {SECRET}"
    with FakeLLMServer(responder=lambda r: Reply(knob_diff())) as srv:
        store = await open_store(tmp_path)
        m = build_llm_mutator(
            [f"openai-compat:coder@{srv.url}/v1"],
            None,
            w,
            home=tmp_path,
            settings=LLMSettings(meta_every=0, strategies=[risky]),
        )
        p = await m.propose(context(store, w, view(w.seed_source)))
        assert p is not None
        text = json.dumps(srv.requests[0].body)
        assert "# Strategy for this change" in srv.requests[0].prompt_text and "Specialise the chunks" in text
        assert SECRET not in text and "SECRET" not in text
        assert not any(re.search(rf"(?<![A-Za-z0-9_]){h}(?![A-Za-z0-9_])", text) for h in HIDDEN)
        stored = await strat.load(store, "run1")
        assert stored.get("s1").pulls == 1 and stored.pending == {p.llm_call_ids[-1]: "s1"}
        assert SECRET not in stored.to_json()
        await m.close()
        await store.close()


async def test_cli_steers_strategies_and_report_lists_them(tmp_path, capsys):
    import argparse

    from llm_helpers import open_store

    from cuco_tui.headless import strategy_table
    from cuco_tui.verbs import control as control_verb
    from cuco_tui.verbs.common import parse_sets

    store = await open_store(tmp_path)
    async with store.transaction() as tx:
        await strat.save(tx, "run1", strat.seeded(load_workload("demo"), [GOOD, *BAD]))
    await store.close()
    parser = argparse.ArgumentParser()
    control_verb.register(parser.add_subparsers())

    def cuco(*argv: str) -> int:
        args = parser.parse_args(list(argv))
        args.home = str(tmp_path)  # the global --home of the full command line
        return args.func(args)

    assert await asyncio.to_thread(cuco, "strategy", "run1", "pin", "s2") == 0
    assert await asyncio.to_thread(cuco, "strategy", "run1", "retire", "s3", "--reason", "collides") == 0
    assert await asyncio.to_thread(cuco, "strategy", "run1", "add", "Fuse", "the", "copy") == 0
    with pytest.raises(control.InputError, match="no strategy 's9'"):
        await asyncio.to_thread(cuco, "strategy", "run1", "pin", "s9")
    rs = ReadStore(tmp_path)
    rows = {r["id"]: r for r in build_report(rs, "run1")["strategies"]}
    rs.close()
    assert rows["s2"]["pinned"] and rows["s3"]["status"] == "retired" and "collides" in rows["s3"]["why"]
    assert rows["s4"]["text"] == "Fuse the copy" and rows["s4"]["origin"] == "operator"
    assert parse_sets(["strategy.add=A, with a comma", "strategy.add=B", "islands=2"]) == {
        "strategy.add": ["A, with a comma", "B"],
        "islands": "2",
    }
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(strategy_table(list(rows.values())))
    text = console.export_text()
    assert "pinned" in text and "retired (retired by the operator: collides)" in text
