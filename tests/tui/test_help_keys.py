"""The keys: every screen's keys come from one registry, `?` lists them all by the names the footer shows,
a key pressed does what `?` says it does, and a key remapped in config.yaml is listed and works."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import pkgutil
import sys
from pathlib import Path

from textual.app import App
from textual.binding import Binding
from textual.widgets import DataTable

import cuco_tui
from cuco_tui.actions import ACTIONS, BY_ID, SCOPES, bindings_for
from cuco_tui.app import CucoApp
from cuco_tui.screens import HelpScreen
from cuco_tui.screens.insight import ConfigsScreen, LlmScreen
from cuco_tui.screens.lineage import LineageScreen
from cuco_tui.screens.nodes import NodesScreen
from cuco_tui.screens.review import ReviewScreen
from cuco_tui.screens.runs import RunsScreen
from cuco_tui.settings import load_settings
from cuco_tui.widgets.candidates import CandidatesTable
from tests.tui.waiting import until

sys.path.insert(0, str(Path(__file__).parent))
from storefill import fill_store  # noqa: E402

# what the main screen's keys that open a screen say under `?`, the screen a person then sees, and the title
# its own keys have under `?`
OPENS = {
    "Lineage": (LineageScreen, "lineage (L)"),
    "Per config": (ConfigsScreen, "per config (C)"),
    "LLMs": (LlmScreen, "LLMs (M)"),
    "Nodes": (NodesScreen, "nodes (n)"),
    "Runs": (RunsScreen, "runs (r)"),
    "Review queue": (ReviewScreen, "review (v)"),
}


def _classes_with_keys() -> list[type]:
    """Every class of the TUI package that declares keys of its own (found by walking the package, not read
    from the registry: a screen that declares keys outside it fails here)."""
    found = []
    for info in pkgutil.walk_packages(cuco_tui.__path__, "cuco_tui."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and "BINDINGS" in vars(cls) and cls.BINDINGS:
                found.append(cls)
    return found


def _fields(binding: Binding) -> tuple:
    return (binding.key, binding.action, binding.description, binding.show, binding.priority, binding.id)


def test_every_screen_takes_its_keys_from_the_registry():
    scopes_bound = {}
    for cls in _classes_with_keys():
        ids = [b.id for b in cls.BINDINGS]
        assert all(i in BY_ID for i in ids), (cls.__name__, ids)
        scope = BY_ID[ids[0]].scope
        assert [_fields(b) for b in cls.BINDINGS] == [_fields(b) for b in bindings_for(scope)], cls.__name__
        assert scope not in scopes_bound, (scope, cls.__name__, scopes_bound.get(scope))
        scopes_bound[scope] = cls
    assert set(scopes_bound) == set(SCOPES)  # no scope that no screen takes
    assert len(BY_ID) == len(ACTIONS)  # ids are unique
    for action in ACTIONS:  # ids are scoped; each runs a method that exists
        assert action.scope == "main" or action.id.startswith(action.scope + "."), action.id
        target, name = (
            (App, action.action[4:])
            if action.action.startswith("app.")
            else (scopes_bound[action.scope], action.action)
        )
        assert hasattr(target, "action_" + name.split("(")[0]), action


async def _help_rows(app: CucoApp, pilot) -> list[tuple[str, str, str, str]]:
    await pilot.press("question_mark")
    assert await until(lambda: isinstance(app.screen, HelpScreen), 5)
    table = app.screen.query_one(DataTable)
    rows = [tuple(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]
    await pilot.press("escape")
    assert await until(lambda: not isinstance(app.screen, HelpScreen), 5)
    return rows


def _key_to_press(app: CucoApp, shown: str) -> str:
    """The first key `?` shows for an action (`esc L q` -> `escape`), as Pilot presses it."""
    first = shown.split()[0]
    names = {k.strip() for a in ACTIONS for k in a.keys.split(",")}
    return next(k for k in names if app.get_key_display(Binding(k, "")) == first)


async def test_help_lists_every_key_of_every_screen(tmp_path):
    await asyncio.to_thread(fill_store, tmp_path, run_id="help-1", n=6)
    app = CucoApp(tmp_path, "help-1")
    async with app.run_test(size=(120, 40)) as pilot:
        rows = await _help_rows(app, pilot)
        listed = {(scope, key, action, binding_id) for scope, key, action, binding_id in rows}
        for cls in _classes_with_keys():
            for binding in cls.BINDINGS:
                keys = " ".join(app.get_key_display(Binding(k.strip(), "")) for k in binding.key.split(","))
                scope = SCOPES[BY_ID[binding.id].scope]
                assert (scope, keys, binding.description, binding.id) in listed, (cls.__name__, binding)
        for _, key, _, _ in rows:  # the names a person reads, not Textual's
            assert not any(raw in key for raw in ("slash", "question_mark", "square_bracket")), key
        assert any(scope == "numbers" and key == "eff" for scope, key, _, _ in rows)
        assert max(len(action) for _, _, action, _ in rows) <= 44  # readable at 80 columns
        assert {a.keys for a in ACTIONS if a.action == "reload"} == {"ctrl+r"}  # one key per action


async def test_keys_do_what_help_says_on_every_screen(tmp_path):
    await asyncio.to_thread(fill_store, tmp_path, run_id="help-2", n=6)
    app = CucoApp(tmp_path, "help-2")
    async with app.run_test(size=(120, 40)) as pilot:
        rows = await _help_rows(app, pilot)
        main = app.screen
        by_title = {(scope, action): key for scope, key, action, _ in rows}
        for description, (screen_class, title) in OPENS.items():
            await pilot.press(_key_to_press(app, by_title[("main", description)]))
            assert await until(lambda cls=screen_class: isinstance(app.screen, cls), 5), description
            # `?` works here too; its Back key, as listed under this screen's title, goes back
            here = await _help_rows(app, pilot)
            assert isinstance(app.screen, screen_class)
            back = next(key for scope, key, action, _ in here if scope == title and action == "Back")
            await pilot.press(_key_to_press(app, back))
            assert await until(lambda: app.screen is main, 5), (description, back)
        # a widget's key: `s` on the candidates table sorts by speedup, `S` reverses it
        table = app.screen.query_one(CandidatesTable)
        table.focus()
        await pilot.press(_key_to_press(app, by_title[("candidates", "Sort by speedup / proposal order")]))
        assert await until(lambda: app.sort is not None and app.sort[0] == "speedup", 5), app.sort
        first = app.sort
        await pilot.press(_key_to_press(app, by_title[("candidates", "Reverse the sort")]))
        assert await until(lambda: app.sort is not None and app.sort != first, 5), (first, app.sort)


async def test_a_remapped_key_is_listed_and_works(tmp_path):
    await asyncio.to_thread(fill_store, tmp_path, run_id="help-3", n=6)
    (tmp_path / "config.yaml").write_text("keymap:\n  runs: R\n  runs.back: backspace\n  sort: o\n")
    settings = load_settings(tmp_path, env={})
    assert settings.keymap["runs"] == "R"
    # a keymap entry that names no action is reported with the file and the id it probably meant
    assert settings.problems == [
        f"{tmp_path / 'config.yaml'}: keymap: no key action 'sort'; did you mean 'candidates.sort'? (`?` lists the ids)"
    ]
    app = CucoApp(tmp_path, "help-3", settings=settings)
    async with app.run_test(size=(120, 40)) as pilot:
        rows = await _help_rows(app, pilot)
        assert ("main", "R", "Runs", "runs") in rows
        assert ("runs (r)", app.get_key_display(Binding("backspace", "")), "Back", "runs.back") in rows
        main = app.screen
        await pilot.press("r")  # the old key no longer opens the runs screen
        await pilot.pause()
        assert app.screen is main
        await pilot.press("R")
        assert await until(lambda: isinstance(app.screen, RunsScreen), 5)
        await pilot.press("r")  # nor closes it
        await pilot.pause()
        assert isinstance(app.screen, RunsScreen)
        await pilot.press("backspace")
        assert await until(lambda: app.screen is main, 5)
