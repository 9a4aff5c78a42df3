"""Search and filter-with-context over log lines: the pattern a user types, the lines
it shows (:class:`Shown`, as a match or as context) and the gaps between them."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from console.logs.models import LogLine


@dataclass(frozen=True, slots=True)
class Gap:
    """Lines left out between two shown parts of a filtered view."""

    skipped: int


@dataclass(frozen=True, slots=True)
class Shown:
    line: LogLine
    match: bool  # True: it matched; False: shown as context


def compile_search(pattern: str) -> re.Pattern[str]:
    """A case-insensitive regex; raises ValueError naming what is wrong with it."""
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc


def line_prefilter(regex: re.Pattern[str]) -> re.Pattern[str] | None:
    """A regex that finds, in lines joined by "\\n", every place where ``regex`` matches
    one line (it may find more): ``^``/``$`` made per line. None when no such
    variant is safe (string anchors, dot-all): then every line is tried."""
    if regex.flags & re.DOTALL or any(a in regex.pattern for a in ("\\A", "\\Z", "(?s")):
        return None
    return re.compile(regex.pattern, regex.flags | re.MULTILINE)


def with_context(
    hits: Sequence[int], total: int, context: int, line_at: Callable[[int], LogLine]
) -> list[Shown | Gap]:
    out: list[Shown | Gap] = []
    shown_until = -1  # last index already shown
    hit_set = set(hits)
    for i in hits:
        first = max(i - context, shown_until + 1)
        if first > shown_until + 1:
            out.append(Gap(first - shown_until - 1))
        for j in range(first, min(i + context, total - 1) + 1):
            out.append(Shown(line_at(j), j in hit_set))
        shown_until = max(shown_until, min(i + context, total - 1))
    if out and shown_until < total - 1:
        out.append(Gap(total - 1 - shown_until))
    return out


def filter_with_context(
    lines: Sequence[LogLine], pattern: str | re.Pattern[str], context: int = 0
) -> list[Shown | Gap]:
    """Matching lines with ``context`` lines either side, a :class:`Gap` between parts."""
    if context < 0:
        raise ValueError(f"context must be >= 0, got {context}")
    regex = compile_search(pattern) if isinstance(pattern, str) else pattern
    hits = [i for i, line in enumerate(lines) if regex.search(line.text)]
    return with_context(hits, len(lines), context, lines.__getitem__)
