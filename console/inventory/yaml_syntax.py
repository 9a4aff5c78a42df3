"""A YAML syntax error of hosts.yaml, worded where the user can fix it.

ruamel reports an unclosed ``[``, ``{`` or quote where it gave up: often the end of the
file, a line past its last one ("expected ',' or ']', but got '<stream end>'"). What the
user must fix is where the construct opened: ruamel's ``context_mark`` for a flow
collection or a quoted scalar, else the innermost flow collection still open when the
parser stopped (found by scanning the tokens up to there). The message names that line
and says what is unclosed; the parser's own position follows as a second hint.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.tokens import (
    FlowMappingEndToken,
    FlowMappingStartToken,
    FlowSequenceEndToken,
    FlowSequenceStartToken,
)

from console.errors import InventoryError

_FLOW_CONTEXTS = {
    "while parsing a flow sequence": "'[' (a list)",
    "while parsing a flow mapping": "'{' (a mapping)",
}
# How a quoted scalar ends that was never closed: the file, or a document, ended inside it.
_QUOTE_RUNS_OUT = ("end of stream", "document separator")
QUOTES = ("'", '"')


class Position(NamedTuple):
    """A place in the file: 1-based line and column, or the end of the file."""

    line: int
    column: int
    at_end: bool

    def words(self, opened: Position | None = None) -> str:
        """``line 4, column 9`` (only the column when on ``opened``'s line)."""
        if self.at_end:
            return "at the end of the file"
        if opened is not None and opened.line == self.line:
            return f"at column {self.column}"
        return f"at line {self.line}, column {self.column}"


class Unclosed(NamedTuple):
    what: str  # "'[' (a list)"
    at: Position


def syntax_error(exc: MarkedYAMLError, text: str, path: str) -> InventoryError:
    """The InventoryError for ``exc``, raised by ruamel while reading ``text``."""
    problem = str(exc.problem or exc.context or "invalid YAML")
    stopped = _position(exc.problem_mark, text)
    unclosed = _unclosed(exc, text)
    if unclosed is not None:
        message = (
            f"YAML syntax error: {unclosed.what} opened at column {unclosed.at.column} "
            "is never closed"
        )
        if stopped is not None and stopped != unclosed.at:
            message += f" (the parser stopped {stopped.words(unclosed.at)}: {problem})"
        return InventoryError(message, path=path, line=unclosed.at.line)
    context = _position(exc.context_mark, text)
    if stopped is None:
        return InventoryError(
            f"YAML syntax error: {problem}", path=path, line=context.line if context else None
        )
    if stopped.at_end:
        # Never a line past the last one: the end of the file, said as such.
        return InventoryError(
            f"YAML syntax error: {problem} (at the end of the file)",
            path=path,
            line=context.line if context is not None else _last_line(text),
        )
    return InventoryError(f"YAML syntax error: {problem}", path=path, line=stopped.line)


def _unclosed(exc: MarkedYAMLError, text: str) -> Unclosed | None:
    """The construct ``exc`` leaves open, with where it opened; None when it is another
    kind of mistake."""
    context = str(exc.context or "")
    problem = str(exc.problem or "")
    opened = _position(exc.context_mark, text)
    if context in _FLOW_CONTEXTS and problem.startswith("expected ',' or") and opened:
        return Unclosed(_FLOW_CONTEXTS[context], opened)
    if "quoted scalar" in context and opened and any(s in problem for s in _QUOTE_RUNS_OUT):
        quote = _char_at(text, exc.context_mark)
        quote = quote if quote in QUOTES else QUOTES[1]
        return Unclosed(f"{quote!r} (a quoted string)", opened)
    if "<stream end>" in problem and exc.problem_mark is not None:
        return _open_flow_at(text, int(exc.problem_mark.index))
    return None


def _open_flow_at(text: str, index: int) -> Unclosed | None:
    """The innermost ``[`` or ``{`` still open at ``index`` of ``text`` (by its tokens)."""
    stack: list[Any] = []
    try:
        for token in YAML(typ="rt").scan(text):
            if token.start_mark.index >= index:
                break
            if isinstance(token, FlowSequenceStartToken | FlowMappingStartToken):
                stack.append(token)
            elif isinstance(token, FlowSequenceEndToken | FlowMappingEndToken) and stack:
                stack.pop()
    except YAMLError:
        pass  # the scanner stops at a mistake of its own; what opened before it stands
    if not stack:
        return None
    token = stack[-1]
    what = (
        _FLOW_CONTEXTS["while parsing a flow sequence"]
        if isinstance(token, FlowSequenceStartToken)
        else _FLOW_CONTEXTS["while parsing a flow mapping"]
    )
    at = _position(token.start_mark, text)
    return None if at is None else Unclosed(what, at)


def _position(mark: Any, text: str) -> Position | None:
    if mark is None or getattr(mark, "line", None) is None:
        return None
    line, column = int(mark.line) + 1, int(mark.column) + 1
    index = getattr(mark, "index", None)
    at_end = (index is not None and index >= len(text)) or line > _last_line(text)
    return Position(line, column, at_end)


def _last_line(text: str) -> int:
    return max(1, len(text.splitlines()))


def _char_at(text: str, mark: Any) -> str:
    index = getattr(mark, "index", None)
    return text[index] if isinstance(index, int) and 0 <= index < len(text) else ""
