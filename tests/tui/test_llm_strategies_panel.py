"""The LLM panel's strategies table, pressed with Pilot against a live engine (the real Engine with the LLM
mutator talking to an OpenAI-compatible test server, a synthetic executor, the real daemon socket): `p` pins,
`x` retires and `a` adds a strategy; each is an operator mark in the store, the panel shows it, and the
mutator follows it (a pinned strategy is the only one later prompts carry)."""

from __future__ import annotations

import asyncio
import itertools
import json
import re

import pytest
from textual.widgets import Input, Log

from cuco_tui.app import CucoApp
from cuco_tui.screens.insight import LlmScreen
from cuco_tui.settings import TuiSettings
from cuco_tui.widgets.llm_panel import StrategiesTable, StrategyModal
from engine.daemon import protocol
from engine.store.store import ReadStore
from tests.engine.synthetic import SyntheticExecutor
from tests.llm.fake_llm import FakeLLMServer, Reply
from tests.tui.waiting import until

engine_mod = pytest.importorskip("engine.run.engine")

RUN = "strat-tui-1"
CHUNK_RE = re.compile(r"static const int kChunkRows = (\d+);  // cuco:knob chunk_rows")
STRATEGY_RE = re.compile(r"# Strategy for this change\n(.*)\n")


def responder(carried: list[str]):
    counter = itertools.count(1000)

    def answer(req) -> Reply:
        text = req.prompt_text
        if "review an evolutionary search" in text or "You maintain the strategies" in text:
            return Reply("[]")
        m = STRATEGY_RE.search(text)
        carried.append(m.group(1) if m else "")
        old = CHUNK_RE.search(text.split("# Parent program", 1)[1]).group(0)
        new = re.sub(r"= \d+;", f"= {next(counter)};", old)
        if "Answer with the new text of every EVOLVE-BLOCK" in text:
            source = text.split("# Parent program", 1)[1].split("```\n", 1)[1]
            block = source[source.index("// EVOLVE-BLOCK-START") : source.index("// EVOLVE-BLOCK-END")]
            return Reply(f"Done.\n```cpp\n{block.replace(old, new)}// EVOLVE-BLOCK-END\n```\n")
        return Reply(f"Done.\n<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE\n")

    return answer


def rows(table: StrategiesTable) -> dict[str, list[str]]:
    out = {}
    for i in range(table.row_count):
        cells = [str(c) for c in table.get_row_at(i)]
        out[cells[0]] = cells
    return out


def stored_population(db: ReadStore) -> dict:
    row = db.fetchone("SELECT value_json FROM run_state WHERE run_id=? AND key='strategies'", (RUN,))
    return json.loads(row["value_json"]) if row else {}


async def test_pin_retire_and_add_from_the_llm_panel(tmp_path):
    from engine.config import RunConfig
    from engine.daemon.daemon import serve
    from engine.workload import load_workload

    carried: list[str] = []
    with FakeLLMServer(responder=responder(carried)) as srv:
        config = RunConfig(
            max_evals=400,
            concurrency=1,
            islands=1,
            mutator="llm",
            meta_every=0,
            llm=[f"openai-compat:coder@{srv.url}/v1"],
            novelty_threshold=1.0,
            reverify_best=False,
        )
        executor = SyntheticExecutor(slots=1, durations={"build": 0.05, "verify": 0.05, "benchmark": 0.05})
        engine = await engine_mod.Engine.create(tmp_path, load_workload("demo"), config, run_id=RUN, executor=executor)
        task = asyncio.create_task(serve(engine, tmp_path, RUN))
        try:
            assert await until(lambda: protocol.live_run_info(tmp_path, RUN) is not None, 20)
            info = protocol.live_run_info(tmp_path, RUN)
            db = ReadStore(tmp_path)
            assert await until(lambda: len(stored_population(db).get("strategies", [])) >= 3, 30)
            app = CucoApp(tmp_path, RUN, socket_path=info.socket, settings=TuiSettings(theme="cuco-dark"))
            async with app.run_test(size=(140, 45)) as pilot:
                assert await until(lambda: app.live, 20)
                await pilot.press("M")
                assert await until(lambda: isinstance(app.screen, LlmScreen) and app.screen.panel is not None, 10)
                table = app.screen.query_one(StrategiesTable)
                assert await until(lambda: "s2" in rows(table), 10)
                table.focus()

                # p: pin s2
                table.move_cursor(row=table.get_row_index("s2"))
                await pilot.press("p")
                assert await until(lambda: rows(table).get("s2", [""] * 3)[2] == "pinned", 15)
                mark = db.fetchone("SELECT * FROM strategy_marks WHERE run_id=? ORDER BY id DESC LIMIT 1", (RUN,))
                assert (mark["verdict"], mark["strategy"]) == ("pin", "s2")

                # x: retire s3
                table.move_cursor(row=table.get_row_index("s3"))
                await pilot.press("x")
                assert await until(lambda: rows(table).get("s3", [""] * 3)[2] == "retired", 15)

                # a: add one, typed into the modal
                await pilot.press("a")
                assert await until(lambda: isinstance(app.screen, StrategyModal), 5)
                app.screen.query_one(Input).value = "Fuse the copy into the compute loop."
                await pilot.press("enter")
                assert await until(
                    lambda: any(r["text"] == "Fuse the copy into the compute loop." for r in table.records.values()), 15
                )
                added = next(sid for sid, r in table.records.items() if r["origin"] == "operator")
                assert rows(table)[added][1] == "Fuse the copy into the compute lo…"  # whole below the table
                verdicts = [
                    r["verdict"]
                    for r in db.fetchall("SELECT verdict FROM strategy_marks WHERE run_id=? ORDER BY id", (RUN,))
                ]
                assert verdicts == ["pin", "retire", "add"]
                log = app._main.query_one("#engine-log", Log)  # the marks reach the engine log like accept/reject
                assert await until(
                    lambda: (
                        any("strategy s2 pin" in line for line in log.lines)
                        and any("strategy s3 retire: retired in the LLM panel" in line for line in log.lines)
                    ),
                    10,
                )

                # the mutator folds the marks in: stored, and only the pinned strategy is carried from now on
                def folded() -> bool:
                    pop = stored_population(db)
                    by_id = {s["id"]: s for s in pop.get("strategies", [])}
                    return pop.get("marks_seen", 0) > 0 and by_id["s2"]["pinned"] and by_id["s3"]["status"] == "retired"

                assert await until(folded, 30)
                s2 = {s["id"]: s for s in stored_population(db)["strategies"]}["s2"]["text"]
                seen = len(carried)
                assert await until(lambda: len(carried) >= seen + 3, 30)
                assert set(carried[seen + 1 :]) == {s2}, carried[seen:]

                # p again: unpin
                table.move_cursor(row=table.get_row_index("s2"))
                await pilot.press("p")
                assert await until(lambda: rows(table).get("s2", [""] * 3)[2] == "active", 15)
            db.close()
        finally:
            await engine.stop()
            try:
                await asyncio.wait_for(task, 60)
            finally:
                await engine.close()
