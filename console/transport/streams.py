"""Small stream helpers shared by the ssh and local transports."""

from __future__ import annotations

from collections import deque


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
