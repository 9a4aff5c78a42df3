"""Small stream helpers shared by the ssh and local transports."""

from __future__ import annotations

from collections import deque
from typing import Any


class StderrTail:
    """The last lines a started process wrote to stderr (kept so the stream is drained
    and the process never blocks on a full pipe, yet a failure can still be shown)."""

    def __init__(self, max_lines: int = 200) -> None:
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._partial = ""

    def add(self, chunk: str) -> None:
        text = self._partial + chunk
        *complete, self._partial = text.split("\n")
        self._lines.extend(complete)

    def text(self) -> str:
        tail = list(self._lines)
        if self._partial:
            tail.append(self._partial)
        return "\n".join(tail)


def stderr_summary(process: Any, lines: int = 3, limit: int = 300) -> str:
    """The last ``lines`` of what a started process wrote to stderr, on one line: what
    a failure message shows (every transport's process keeps a :class:`StderrTail`)."""
    tail = getattr(process, "stderr", None)
    text = tail.text() if isinstance(tail, StderrTail) else ""
    return " ".join(text.strip().splitlines()[-lines:])[:limit]
