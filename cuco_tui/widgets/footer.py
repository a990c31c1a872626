"""A one-line footer of the keys that work now, drawn as a single line of text.

Textual's Footer recomposes (unmounts and mounts one widget per key) whenever the focus moves; under a
stream of events that cost 30-130 ms on every `/` or `escape`, right in the path of the key press. This
footer only repaints its one line; a click on a key still runs it.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual import events
from textual.reactive import reactive
from textual.screen import Screen
from textual.widget import Widget


class KeyFooter(Widget):
    COMPONENT_CLASSES = {"key-footer--key", "key-footer--description"}
    DEFAULT_CSS = """
    KeyFooter {
        dock: bottom;
        height: 1;
        background: $footer-background;
        color: $footer-foreground;
    }
    KeyFooter > .key-footer--key {
        color: $footer-key-foreground;
        background: $footer-key-background;
        text-style: bold;
    }
    KeyFooter > .key-footer--description {
        color: $footer-description-foreground;
        background: $footer-description-background;
    }
    """

    show_command_palette = reactive(False)

    def __init__(self, *, show_command_palette: bool = False, id: str | None = None) -> None:
        super().__init__(id=id)
        self.set_reactive(KeyFooter.show_command_palette, show_command_palette)
        self._spans: list[tuple[int, int, str]] = []  # (start, end, key) of each drawn key, for clicks

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen) -> None:
        if self.is_attached and screen is self.screen:
            self.refresh()

    def _items(self) -> list[tuple[str, str, str, bool]]:
        """(key, shown key, description, enabled) per action, in binding order; one key per action."""
        app = self.app
        active = self.screen.active_bindings
        seen: set[str] = set()
        items = []
        for _node, binding, enabled, _tooltip in active.values():
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            label = getattr(app, "binding_label", None)  # the word for the current state, if any
            description = label(binding) if label is not None else binding.description
            items.append((binding.key, app.get_key_display(binding), description, enabled))
        if self.show_command_palette and app.ENABLE_COMMAND_PALETTE:
            found = active.get(app.COMMAND_PALETTE_BINDING)
            if found is not None:
                _node, binding, enabled, _tooltip = found
                items.append((binding.key, app.get_key_display(binding), binding.description, enabled))
        return items

    def render(self) -> Text:
        key_style = self.get_component_rich_style("key-footer--key")
        desc_style = self.get_component_rich_style("key-footer--description")
        text = Text(no_wrap=True, overflow="crop", end="")
        self._spans = []
        for key, shown, description, enabled in self._items():
            dim = Style(dim=True) if not enabled else Style()
            start = text.cell_len
            text.append(f" {shown} ", key_style + dim)
            if description:
                text.append(f"{description} ", desc_style + dim)
            self._spans.append((start, text.cell_len, key))
        return text

    def key_at(self, x: int) -> str | None:
        """The key drawn at column `x` of the footer (None: none)."""
        return next((key for start, end, key in self._spans if start <= x < end), None)

    def on_click(self, event: events.Click) -> None:
        key = self.key_at(event.x)
        if key is not None:
            event.stop()
            self.app.simulate_key(key)
