"""The lineage screen and tab on a filled store: the ancestors back to generation 0, children opened lazily,
the path to the best starred, `b` for the best's lineage, and the highlighted node's diff."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from storefill import fill_store
from textual.widgets import Static, Tree
from waiting import until

from cuco_tui.app import CucoApp
from cuco_tui.screens.lineage import LineageScreen
from cuco_tui.widgets import CandidatesTable

RUN = "lin-1"


def _db(home: Path) -> sqlite3.Connection:
    con = sqlite3.connect(home / "cuco.db")
    con.row_factory = sqlite3.Row
    return con


def _chain(con: sqlite3.Connection, cid: int) -> list[int]:
    out = []
    while cid is not None:
        out.append(cid)
        cid = con.execute("SELECT parent_id FROM candidates WHERE id=?", (cid,)).fetchone()[0]
    return out[::-1]


def _labels(tree: Tree) -> dict[int, str]:
    out = {}
    stack = list(tree.root.children)
    while stack:
        node = stack.pop()
        if node.data is not None:
            out[node.data.id] = str(node.label)
        stack.extend(node.children)
    return out


async def test_lineage_screen(tmp_path):
    await asyncio.to_thread(fill_store, tmp_path, run_id=RUN, n=40)
    con = _db(tmp_path)
    con.execute("UPDATE candidates SET inspiration_ids='[5, 7]' WHERE id=10")
    con.commit()
    # the run's best, #13, branches off #10's lineage at #6: the stars go on 2, 4, 6 and not on 8, 10
    con.execute("UPDATE candidates SET parent_id=6, speedup=3.0, fitness=99999 WHERE id=13")
    con.commit()
    best = 13
    speed = dict(con.execute("SELECT id, speedup FROM candidates").fetchall())
    best_path = set(_chain(con, best))
    assert best_path == {2, 4, 6, 13}
    chain = _chain(con, 10)  # 2, 4, 6, 8, 10: island 1 back to its seed
    assert chain[0] == 2 and len(chain) == 5

    app = CucoApp(tmp_path, RUN)
    async with app.run_test(size=(120, 36)) as pilot:
        table = app.query_one(CandidatesTable)
        assert await until(lambda: table.row_count == 40)
        app.select_candidate(10)
        await pilot.press("L")
        assert await until(lambda: isinstance(app.screen, LineageScreen) and app.screen.best_marked)
        screen = app.screen
        tree = screen.query_one(Tree)
        labels = _labels(tree)
        assert [n.id for n in screen.lineage.chain] == chain
        assert [n.data.id for n in tree.root.children] == chain  # the spine, seed first
        assert "seed" in labels[2] and "g0" in labels[2]
        assert "insp #5 #7" in labels[10]  # inspirations marked
        assert "llm-diff fake-model" in labels[8] and "failed" in labels[8]  # operator and model; no speedup
        for parent, child in zip(chain, chain[1:]):  # the change over the parent
            if speed[parent] is not None and speed[child] is not None:
                assert f"{speed[child] - speed[parent]:+.3f}" in labels[child], labels[child]
            else:
                assert " +" not in labels[child].split("x", 1)[-1].split("insp")[0], labels[child]
        for cid in chain:  # the path to the best is starred
            assert labels[cid].startswith("★") == (cid in best_path), (cid, labels[cid])
        # the focus's child is listed; its own child loads only when opened
        assert 12 in labels and 14 not in labels
        focus = tree.root.children[-1]
        child = next(n for n in focus.children if n.data and n.data.id == 12)
        child.expand()
        assert await until(lambda: 14 in _labels(tree))
        # the highlighted node's diff against its parent
        assert await until(lambda: screen.diff_for == 10), (screen.diff_for, tree.cursor_node)
        diff = str(screen.query_one("#lineage-diff", Static).render())
        assert "#8" in diff and "#10" in diff and "@@" in diff, diff[:300]
        tree.move_cursor(tree.root.children[1])  # #4
        assert await until(lambda: screen.diff_for == 4)
        await pilot.press("enter")  # #4's own lineage
        assert await until(lambda: screen.focus_id == 4 and len(screen.lineage.chain) == 2)
        await pilot.press("b")  # the best's lineage, all starred
        assert await until(lambda: screen.focus_id == best and screen.best_marked)
        labels = _labels(tree)
        assert all(labels[cid].startswith("★") for cid in _chain(con, best))
        assert f"the path to the best #{best}" in str(screen.query_one("#lineage-title", Static).render())
        await pilot.press("escape")
        assert await until(lambda: not isinstance(app.screen, LineageScreen))


async def test_lineage_tab_and_a_fork_reaches_back_into_its_parent_run(tmp_path):
    await asyncio.to_thread(fill_store, tmp_path, run_id=RUN, n=20)
    con = _db(tmp_path)
    # a fork's copy of #9 (its engine writes origin_id and operator 'fork', no parent)
    con.execute(
        "INSERT INTO candidates (id, run_id, number, island, generation, parent_id, operator, mutator, "
        "source_hash, descriptor_json, cell, status, correct, speedup, origin_id, created_at) "
        "SELECT 1000, ?, 0, 0, 0, NULL, 'fork', 'fork', source_hash, descriptor_json, cell, status, "
        "correct, speedup, 9, created_at FROM candidates WHERE id=9",
        (RUN + "-fork",),
    )
    con.commit()
    app = CucoApp(tmp_path, RUN + "-fork")
    async with app.run_test(size=(120, 36)) as pilot:
        table = app.query_one(CandidatesTable)
        assert await until(lambda: table.row_count == 1)
        app.query_one("#detail-tabs").active = "tab-lineage"
        assert await until(lambda: app.detail is not None and app.detail.id == 1000)
        await pilot.pause(0.2)
        text = str(app.query_one("#detail-lineage", Static).render())
        lines = [line for line in text.splitlines() if "#" in line and " g" in line]
        ids = [word for line in lines for word in line.split() if word.startswith("#")][:6]
        assert ids == ["#1", "#3", "#5", "#7", "#9", "#1000"], text
        assert "fork" in lines[-1]


def test_best_path_is_walked_once_and_follows_a_new_best(tmp_path, monkeypatch):
    """BestPaths gives the same path as a full walk: for a first best, a new best descending from it, and a
    new best on another island (the walk goes in steps, here 3 generations, to cross step boundaries)."""
    from cuco_tui.data import StoreView
    from engine.views import lineage as lineage_data

    monkeypatch.setattr(lineage_data, "WALK_STEP", 3)
    fill_store(tmp_path, run_id=RUN, n=40)
    con = _db(tmp_path)
    view = StoreView(tmp_path)
    walker = lineage_data.BestPaths()
    queries = []

    def fetch(sql, params=()):
        queries.append(sql)
        return view.fetch(sql, params)

    try:
        for rank, new_best in enumerate((20, 24, 21, 27)):  # #24 descends from #20; #21, #27 on the other island
            con.execute(
                "UPDATE candidates SET status='done', speedup=9, fitness=? WHERE id=?", (99999 + rank, new_best)
            )
            con.commit()
            expected_best = con.execute(
                "SELECT id FROM candidates WHERE run_id=? AND status='done' ORDER BY fitness DESC LIMIT 1", (RUN,)
            ).fetchone()[0]
            best, path = walker.get(fetch, RUN)
            assert best == expected_best and path == set(_chain(con, best)), (best, sorted(path))
        queries.clear()
        assert walker.get(fetch, RUN)[0] == 27 and len(queries) == 1  # known: only the best is asked for
    finally:
        view.close()
        con.close()


async def test_older_ancestors_are_read_on_request(tmp_path, monkeypatch):
    """A deep lineage opens with its newest ancestors and an 'older ancestors' line; enter on it reads more,
    until generation 0 (here 2 at a time)."""
    import cuco_tui.screens.lineage as lineage_screen

    monkeypatch.setattr(lineage_screen, "ANCESTORS_SHOWN", 2)
    await asyncio.to_thread(fill_store, tmp_path, run_id=RUN, n=20)
    app = CucoApp(tmp_path, RUN)
    async with app.run_test(size=(120, 36)) as pilot:
        table = app.query_one(CandidatesTable)
        assert await until(lambda: table.row_count == 20)
        app.select_candidate(13)  # 13, 11, 9, 7, 5, 3, 1
        await pilot.press("L")
        assert await until(lambda: isinstance(app.screen, LineageScreen) and app.screen.lineage is not None)
        screen = app.screen
        tree = screen.query_one(Tree)
        for shown in (3, 5, 7):
            assert await until(lambda shown=shown: screen.lineage is not None and len(screen.lineage.chain) == shown)
            first = tree.root.children[0]
            if shown < 7:
                assert first.data == lineage_screen.OLDER and "older ancestors" in str(first.label)
                assert [n.data.id for n in tree.root.children[1:]] == list(range(13 - 2 * (shown - 1), 14, 2))
                tree.move_cursor(first)
                await pilot.press("enter")
            else:
                assert [n.data.id for n in tree.root.children] == [1, 3, 5, 7, 9, 11, 13]  # back to the seed
                assert "back to generation 0" in str(screen.query_one("#lineage-title", Static).render())
