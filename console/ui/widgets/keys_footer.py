"""The footer every screen shows: Textual's ``Footer``, without its per-key restyle.

``Footer`` rebuilds its keys whenever a screen's bindings change (mount, focus, a screen
switch). Each new ``FooterKey`` starts compact, turns the ``-compact`` class on, and is
then bound to the footer's ``compact = False`` and turns it off again: two style updates
per key, about 0.3 CPU s of a 64-host console's first frame (~10 rebuilds x 24 keys).
Starting each key at the footer's own value makes both no-ops; the keys look the same.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Footer
from textual.widgets._footer import FooterKey


class KeysFooter(Footer):
    def compose(self) -> ComposeResult:
        for widget in super().compose():
            if isinstance(widget, FooterKey):
                widget.set_reactive(FooterKey.compact, self.compact)
            yield widget
