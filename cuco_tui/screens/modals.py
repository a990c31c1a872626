"""Modal dialogs: accept note, reject reason (required), fork, confirmation."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, RadioButton, RadioSet

from ..actions import bindings_for


class _Dialog(ModalScreen):
    BINDINGS = bindings_for("dialog")

    def action_cancel(self) -> None:
        self.dismiss(None)


class NoteModal(_Dialog):
    """Accept a candidate; the note is optional. Returns the note (str) or None when cancelled."""

    def __init__(self, candidate_id: int) -> None:
        super().__init__()
        self.candidate_id = candidate_id

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Accept candidate #{self.candidate_id}")
            yield Input(placeholder="note (optional), Enter to accept", id="note")
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Accept", variant="success", id="ok")

    @on(Input.Submitted)
    @on(Button.Pressed, "#ok")
    def _ok(self) -> None:
        self.dismiss(self.query_one("#note", Input).value.strip())

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)


class ReasonModal(_Dialog):
    """Reject a candidate; a reason is required. Returns the reason or None when cancelled."""

    def __init__(self, candidate_id: int) -> None:
        super().__init__()
        self.candidate_id = candidate_id

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Reject candidate #{self.candidate_id}: why?")
            yield Input(placeholder="reason (required)", id="reason")
            yield Label("", id="reason-error", classes="error")
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Reject", variant="error", id="ok")

    @on(Input.Submitted)
    @on(Button.Pressed, "#ok")
    def _ok(self) -> None:
        reason = self.query_one("#reason", Input).value.strip()
        if not reason:
            self.query_one("#reason-error", Label).update("A reason is required to reject.")
            self.query_one("#reason", Input).focus()
            return
        self.dismiss(reason)

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)


@dataclass
class ForkRequest:
    from_candidate: int | None
    name: str | None
    overrides: dict[str, Any] = field(default_factory=dict)
    start: bool = False


def parse_overrides(text: str) -> dict[str, str]:
    """`islands=4 mutator=llm llm=anthropic:claude-x` -> {key: value} (values stay strings)."""
    out: dict[str, str] = {}
    for term in shlex.split(text):
        if "=" not in term:
            raise ValueError(f"{term!r}: write overrides as KEY=VALUE")
        key, value = term.split("=", 1)
        key = key.strip().replace("-", "_")
        if not key:
            raise ValueError(f"{term!r}: empty key")
        out[key] = value
    return out


class ForkModal(_Dialog):
    """Fork the run from the selected candidate or its current state. Returns a ForkRequest or None."""

    def __init__(self, candidate_id: int | None, live: bool) -> None:
        super().__init__()
        self.candidate_id = candidate_id
        self.live = live

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Fork this run")
            with RadioSet(id="from"):
                yield RadioButton(
                    f"from candidate #{self.candidate_id}"
                    if self.candidate_id is not None
                    else "from the selected candidate (none)",
                    id="from-candidate",
                    value=self.candidate_id is not None,
                    disabled=self.candidate_id is None,
                )
                yield RadioButton("from the current state", id="from-state", value=self.candidate_id is None)
            yield Input(placeholder="name (optional)", id="name")
            yield Input(placeholder="overrides: islands=4 mutator=llm llm=MODEL", id="overrides")
            yield Checkbox("start it now", id="start", value=False)
            yield Label("", id="fork-error", classes="error")
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Fork", variant="primary", id="ok")

    def on_mount(self) -> None:
        self.query_one("#name", Input).focus()

    @on(Input.Submitted)
    @on(Button.Pressed, "#ok")
    def _ok(self) -> None:
        try:
            overrides = parse_overrides(self.query_one("#overrides", Input).value)
        except ValueError as exc:
            self.query_one("#fork-error", Label).update(str(exc))
            return
        use_candidate = self.query_one("#from-candidate", RadioButton).value and self.candidate_id is not None
        self.dismiss(
            ForkRequest(
                from_candidate=self.candidate_id if use_candidate else None,
                name=self.query_one("#name", Input).value.strip() or None,
                overrides=overrides,
                start=self.query_one("#start", Checkbox).value,
            )
        )

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)


class ConfirmModal(ModalScreen[bool]):
    BINDINGS = bindings_for("confirm")

    def __init__(self, question: str, yes: str = "Yes") -> None:
        super().__init__()
        self.question = question
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question)
            with Horizontal(classes="buttons"):
                yield Button("No", id="no")
                yield Button(self.yes, variant="error", id="yes")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def action_yes(self) -> None:
        self.dismiss(True)

    def action_no(self) -> None:
        self.dismiss(False)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")
