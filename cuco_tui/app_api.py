"""What the screens, widgets and palette providers ask of the app that mounts them.

`CucoApp` imports them all, so naming it back from them would close an import circle; they see it through
this protocol instead, and one that lacks a method (a test's bare app) is told apart with `isinstance`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from .data import StoreView


@runtime_checkable
class RunApp(Protocol):
    view: StoreView  # the read model every viewer reads through

    def need_live(self, what: str, shell: str | None = None) -> bool: ...

    def send_command(self, op: str, **args: Any) -> object: ...

    def select_candidate(self, candidate_id: int) -> None: ...

    def action_show_runs(self) -> None: ...

    def action_show_nodes(self) -> None: ...

    def palette_candidates(self) -> list[tuple[int, str]]: ...

    def palette_runs(self) -> list[str]: ...

    def palette_nodes(self) -> list[str]: ...
