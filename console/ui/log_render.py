"""How log lines look on the logs screen: a coloured host/rank prefix, highlights."""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.text import Text

from console.display import gap_text, line_prefix, log_line_text
from console.logs.buffer import Gap, Shown
from console.logs.models import LogLine, RankKey, rank_key

# Distinct, readable on dark and light backgrounds.
PALETTE = (
    "#4a9fe0", "#5cc27a", "#e8b339", "#d070d0", "#e07a5f", "#3fb8af", "#9a8cff", "#c0a060",
)  # fmt: skip


def rank_colour(key: RankKey) -> str:
    index = key if isinstance(key, int) else sum(map(ord, key))
    return PALETTE[index % len(PALETTE)]


def line_text(
    line: LogLine,
    *,
    width: int,
    search: re.Pattern[str] | None = None,
    context: bool = False,
    highlight_style: str = "reverse",
) -> Text:
    """``host rank │ text``; matches of ``search`` highlighted; context lines dimmed."""
    key = rank_key(line)
    text = Text(no_wrap=False)
    text.append(f"{line_prefix(line):>{width}} ", style=f"bold {rank_colour(key)}")
    text.append("│ ", style="dim")
    body = Text(
        line.text, style="dim" if context else ("italic" if line.stream == "stderr" else "")
    )
    if search is not None:
        body.highlight_regex(search, highlight_style)
    text.append_text(body)
    return text


def render_lines(
    lines: Iterable[LogLine | Shown | Gap],
    *,
    width: int,
    search: re.Pattern[str] | None = None,
) -> list[Text]:
    out: list[Text] = []
    for item in lines:
        if isinstance(item, Gap):
            out.append(Text(f"   {gap_text(item.skipped)}", style="dim"))
        elif isinstance(item, Shown):
            out.append(line_text(item.line, width=width, search=search, context=not item.match))
        else:
            out.append(line_text(item, width=width, search=search))
    return out


def prefix_width(keys: Iterable[LogLine]) -> int:
    return max((len(line_prefix(line)) for line in keys), default=8)


def plain_lines(items: Iterable[LogLine | Shown | Gap]) -> list[str]:
    """Items as plain lines, the way ``distconsole logs`` prints them (the save file)."""
    return [
        gap_text(item.skipped)
        if isinstance(item, Gap)
        else log_line_text(item.line if isinstance(item, Shown) else item)
        for item in items
    ]
