"""``?``: this app's keys, grouped by screen (the screen below first); it scrolls."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.dom import DOMNode
from textual.screen import ModalScreen
from textual.widgets import Static


@dataclass(frozen=True, slots=True)
class KeyHelp:
    key: str
    description: str
    scope: str  # the group it is listed under: "Everywhere" or a screen's title


# Keys Textual's widgets handle that this app relies on, said once instead of each
# widget's own list (cursor up, cursor down, page up... on every table and list).
MOVING_AROUND: tuple[tuple[str, str], ...] = (
    ("↑/↓", "previous/next row, host or option (hold to move fast)"),
    ("PgUp/PgDn", "a page up/down in tables, lists, logs and this help"),
    ("Home/End", "first/last row"),
    ("tab/shift+tab", "next/previous field, table or panel"),
    ("space", "tick a host or a box in the launch form"),
    ("⏎", "open, choose or launch (as the footer says)"),
)
KeyDisplay = Callable[[Binding], str]


def own_keys(scope: str, bindings: Iterable[BindingType], display: KeyDisplay) -> list[KeyHelp]:
    """One row per action; keys bound to the same action share it ("n/esc")."""
    rows: dict[str, tuple[list[str], str]] = {}
    for binding in Binding.make_bindings(bindings):
        if not binding.description:
            continue
        keys, _ = rows.setdefault(binding.action, ([], binding.description))
        shown = display(binding)
        if shown not in keys:
            keys.append(shown)
    return [KeyHelp("/".join(keys), does, scope) for keys, does in rows.values()]


def keys_by_screen(
    everywhere: Iterable[BindingType],
    screens: Sequence[tuple[str, type[DOMNode]]],
    current: DOMNode,
    display: KeyDisplay,
) -> list[KeyHelp]:
    """This app's own keys, grouped: everywhere, the screen below the help, the other
    screens, moving around. Only each class's own ``BINDINGS`` count: the ones Textual's
    base classes bring (ctrl+q, focus keys, every table's cursor keys) are not this
    app's, and Textual's key panel lists those."""
    ordered = sorted(screens, key=lambda item: not isinstance(current, item[1]))
    keys = own_keys("Everywhere", everywhere, display)
    for title, cls in ordered:
        here = isinstance(current, cls)
        scope = f"{title}: this screen" if here else title
        keys += own_keys(scope, cls.__dict__.get("BINDINGS", ()), display)
    return keys + [KeyHelp(key, does, "Moving around") for key, does in MOVING_AROUND]


def grouped(keys: Sequence[KeyHelp]) -> dict[str, list[KeyHelp]]:
    """Groups in the order their first key comes; keys in the order given."""
    groups: dict[str, list[KeyHelp]] = {}
    for item in keys:
        groups.setdefault(item.scope, []).append(item)
    return groups


def group_text(title: str, keys: Sequence[KeyHelp]) -> Text:
    width = max(len(item.key) for item in keys)
    text = Text(title, style="bold underline")
    for item in keys:
        text.append("\n")
        text.append(f"  {item.key.ljust(width)}", style="bold")
        text.append(f"  {item.description}")
    return text


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "dismiss_help", "Close", show=True),
        Binding("question_mark", "dismiss_help", "Close", key_display="?", show=False),
    ]

    def __init__(self, keys: Sequence[KeyHelp]) -> None:
        super().__init__()
        self.keys = tuple(keys)

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static(
                "Keys  (↑ ↓ PgUp PgDn scroll; Esc or ? closes)", id="help-title", markup=False
            )
            # Focused on mount, so the arrows scroll it (at 80x24 the list is longer).
            with VerticalScroll(id="help-keys"):
                for title, keys in grouped(self.keys).items():
                    yield Static(group_text(title, keys), classes="help-group")

    def on_mount(self) -> None:
        self.query_one("#help-keys", VerticalScroll).focus()

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
