"""`?` lists every key of every screen, by the names the footer shows; one key per action across screens."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import pkgutil
import sys
from pathlib import Path

from textual.binding import Binding
from textual.widgets import DataTable

import cuco_tui
from cuco_tui.app import CucoApp
from cuco_tui.screens import HelpScreen
from tests.tui.waiting import until

sys.path.insert(0, str(Path(__file__).parent))
from storefill import fill_store  # noqa: E402


def _classes_with_keys() -> list[type]:
    """Every class of the TUI package that declares keys of its own (found by walking the package, not read
    from the help's registry: a screen left out of the registry fails here)."""
    found = []
    for info in pkgutil.walk_packages(cuco_tui.__path__, "cuco_tui."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and "BINDINGS" in vars(cls) and cls.BINDINGS:
                found.append(cls)
    return found


async def test_help_lists_every_key_of_every_screen(tmp_path):
    await asyncio.to_thread(fill_store, tmp_path, run_id="help-1", n=6)
    app = CucoApp(tmp_path, "help-1")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        assert await until(lambda: isinstance(app.screen, HelpScreen), 5)
        table = app.screen.query_one(DataTable)
        rows = [tuple(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]
        listed = {(key, action) for _, key, action, _ in rows}
        classes = _classes_with_keys()
        assert len(classes) >= 10, classes
        for cls in classes:
            for binding in cls.BINDINGS:
                assert isinstance(binding, Binding)
                keys = " ".join(app.get_key_display(Binding(k.strip(), "")) for k in binding.key.split(","))
                assert (keys, binding.description) in listed, (cls.__name__, binding.key, binding.description)
        for _, key, _, _ in rows:                                  # the names a person reads, not Textual's
            assert not any(raw in key for raw in ("slash", "question_mark", "square_bracket")), key
        assert any(scope == "numbers" and key == "eff" for scope, key, _, _ in rows)
        assert max(len(action) for _, _, action, _ in rows) <= 44        # readable at 80 columns
        # one key per action across screens
        by_action: dict[str, set[str]] = {}
        for cls in classes:
            for binding in cls.BINDINGS:
                if binding.action == "reload":
                    by_action.setdefault("reload", set()).add(binding.key)
        assert by_action["reload"] == {"ctrl+r"}, by_action
