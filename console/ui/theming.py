"""Themes: Textual ``Theme`` objects read from the ``themes/`` folder (``console.themes``).

Each ``<name>.toml`` holds the fields of :class:`textual.theme.Theme`; its ``[variables]``
table adds CSS variables such as ``$state-up`` that also colour host states in tables.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from functools import cache
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

from textual.theme import BUILTIN_THEMES, Theme

DEFAULT_THEME = "distconsole-dark"

# Colours every theme must provide (defaults below cover Textual's built-in themes).
STATE_VARIABLES: dict[str, str] = {
    "state-up": "#4EBF71",
    "state-connecting": "#ffa62b",
    "state-down": "#ba3c5b",
    "state-auth-failed": "#c678dd",
    "state-host-key-rejected": "#ff7f50",
    "banner-warning-background": "#5a4310",
    "banner-warning-foreground": "#ffe2a0",
}


class ThemeFileError(ValueError):
    """A file in themes/ is not a valid theme (a packaging bug, not user input)."""


def _themes_folder() -> Traversable:
    try:
        return resources.files("console.themes")
    except ModuleNotFoundError:
        # Running from a source checkout that was never installed: the package maps
        # console.themes onto the top-level themes/ folder only once it is installed.
        return Path(__file__).resolve().parents[2] / "themes"


def _theme_from_toml(name: str, text: str) -> Theme:
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ThemeFileError(f"themes/{name}: {exc}") from exc
    try:
        return Theme(**data)
    except TypeError as exc:
        raise ThemeFileError(f"themes/{name}: {exc}") from exc


@cache
def bundled_themes() -> tuple[Theme, ...]:
    """distconsole's own themes, sorted by name."""
    folder = _themes_folder()
    found = [
        _theme_from_toml(entry.name, entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".toml")
    ]
    if not found:
        raise ThemeFileError(f"no *.toml theme found in {folder}")
    return tuple(sorted(found, key=lambda t: t.name))


def theme_choices() -> list[str]:
    """Every name ``--theme`` accepts: distconsole's themes first, then Textual's."""
    ours = [t.name for t in bundled_themes()]
    return ours + sorted(n for n in BUILTIN_THEMES if n not in ours and n != "textual-ansi")


def check_theme(name: str | None) -> str:
    """The theme to use; raises ValueError naming --theme and the choices when unknown."""
    if name is None:
        return DEFAULT_THEME
    choices = theme_choices()
    if name not in choices:
        raise ValueError(f"--theme: unknown theme {name!r}; choices: {', '.join(choices)}")
    return name


_STATE_FALLBACK = {
    "up": "success",
    "connecting": "warning",
    "down": "error",
    "auth-failed": "accent",
    "host-key-rejected": "error",
}


def state_colour(theme: Theme, state: str) -> str:
    """The colour of a host state: the theme's ``state-*`` variable, else its semantic colour."""
    own = theme.variables.get(f"state-{state}")
    if own:
        return own
    semantic = getattr(theme, _STATE_FALLBACK.get(state, "foreground"), None)
    return str(semantic or STATE_VARIABLES.get(f"state-{state}", "default"))


def next_theme(current: str, names: Iterable[str]) -> str:
    """The theme after ``current`` in ``names`` (wrapping), for the cycle-theme key."""
    ordered = list(names)
    if current not in ordered:
        return ordered[0]
    return ordered[(ordered.index(current) + 1) % len(ordered)]
