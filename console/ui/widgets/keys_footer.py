"""The footer every screen shows: Textual's ``Footer``, without its needless rebuilds.

``Footer`` rebuilds all its keys whenever a screen's bindings may have changed (mount,
every focus change, a screen switch, ``refresh_bindings``), about ten times while a
64-host console starts, and each rebuild mounts and styles ~24 keys (0.1-0.2 CPU s of
the first frame). This footer rebuilds only when the keys it would show differ from the
ones it shows. And each new ``FooterKey`` starts compact, turns the ``-compact`` class
on, then is bound to the footer's ``compact = False`` and turns it off again: two style
updates per key. Starting each key at the footer's own value makes both no-ops. The
keys look and work the same.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.events import Resize
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey


def _keys_of(screen: Screen[Any]) -> tuple[object, ...]:
    """What a footer on ``screen`` would show (keys, bindings, enabled, tooltips)."""
    return tuple(
        (key, active.binding, active.enabled, active.tooltip)
        for key, active in screen.active_bindings.items()
    )


# Narrower than this the footer is compact (keys closer together) and leaves out the
# app-wide screen keys (h g j l t; ? lists them): at 80 columns the whole row of keys
# was cut, "? Help" and ": Commands" included.
NARROW_BELOW = 120
KEPT_APP_KEYS = ("q", "question_mark", "colon", "f1")


class KeysFooter(Footer):
    _shown_keys: tuple[object, ...] | None = None
    _narrow: bool | None = None

    def _is_narrow(self) -> bool:
        width = self.size.width or self.app.size.width
        return width < NARROW_BELOW

    def on_resize(self, _event: Resize) -> None:
        narrow = self._is_narrow()
        if narrow != self._narrow:
            self._narrow = narrow
            self.compact = narrow
            self._shown_keys = None
            if self._bindings_ready:
                self.call_after_refresh(self.recompose)

    def compose(self) -> ComposeResult:
        if self._bindings_ready:
            self._shown_keys = _keys_of(self.screen)
        narrow = self._narrow if self._narrow is not None else self._is_narrow()
        # Known from here on: the first resize (the same width) rebuilds nothing.
        self._narrow = self.compact = narrow
        hidden = set()
        if narrow:
            hidden = {
                key
                for key, active in self.screen.active_bindings.items()
                if active.node is self.app and key not in KEPT_APP_KEYS
            }
        shown = 0
        for widget in super().compose():
            if isinstance(widget, FooterKey):
                if widget.key in hidden:
                    continue
                widget.set_reactive(FooterKey.compact, self.compact)
                shown += 1
            yield widget
        if hidden:
            self.styles.grid_size_columns = shown

    def bindings_changed(self, screen: Screen[Any]) -> None:
        if (
            self._bindings_ready
            and self._shown_keys is not None
            and self.is_attached
            and screen is self.screen
            and _keys_of(screen) == self._shown_keys
        ):
            return  # the same keys: a rebuild would only redo what is there
        super().bindings_changed(screen)
