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
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey


def _keys_of(screen: Screen[Any]) -> tuple[object, ...]:
    """What a footer on ``screen`` would show (keys, bindings, enabled, tooltips)."""
    return tuple(
        (key, active.binding, active.enabled, active.tooltip)
        for key, active in screen.active_bindings.items()
    )


class KeysFooter(Footer):
    _shown_keys: tuple[object, ...] | None = None

    def compose(self) -> ComposeResult:
        if self._bindings_ready:
            self._shown_keys = _keys_of(self.screen)
        for widget in super().compose():
            if isinstance(widget, FooterKey):
                widget.set_reactive(FooterKey.compact, self.compact)
            yield widget

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
