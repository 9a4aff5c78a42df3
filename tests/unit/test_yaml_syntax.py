"""A YAML syntax error of hosts.yaml names where the unclosed construct opened and what it
is, never a line past the end of the file; the parser's own position follows as a hint.

Real files read by the real loader (ruamel); issue 23 item 5.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from console.errors import InventoryError
from console.inventory import load


def error_of(tmp_path: Path, text: str) -> InventoryError:
    path = tmp_path / "hosts.yaml"
    path.write_text(text)
    with pytest.raises(InventoryError) as info:
        load(path)
    return info.value


# Each case: the file, the line and the message of the error (after "FILE:LINE: ").
UNCLOSED = {
    "list at the last line": (
        "hosts:\n  - a\n  - [b, c\n",
        3,
        "YAML syntax error: '[' (a list) opened at column 5 is never closed "
        "(the parser stopped at the end of the file: expected ',' or ']', but got "
        "'<stream end>')",
    ),
    "mapping at the last line": (
        "hosts:\n  - a\n  - {name: b\n",
        3,
        "YAML syntax error: '{' (a mapping) opened at column 5 is never closed "
        "(the parser stopped at the end of the file: expected ',' or '}', but got "
        "'<stream end>')",
    ),
    "double quote": (
        'hosts:\n  - "a\n  - b\n  - c\n',
        2,
        "YAML syntax error: '\"' (a quoted string) opened at column 5 is never closed "
        "(the parser stopped at the end of the file: found unexpected end of stream)",
    ),
    "single quote without a final newline": (
        "hosts:\n  - a\n  - 'b",
        3,
        'YAML syntax error: "\'" (a quoted string) opened at column 5 is never closed '
        "(the parser stopped at the end of the file: found unexpected end of stream)",
    ),
    "list the next host's keys ran into": (
        "hosts:\n  - name: a\n    address: [10.0.0.1\n  - name: b\n",
        3,
        "YAML syntax error: '[' (a list) opened at column 14 is never closed "
        "(the parser stopped at line 4, column 9: expected ',' or ']', but got ':')",
    ),
    "list closed by the wrong bracket, on its own line": (
        "hosts: [a, b}\n",
        1,
        "YAML syntax error: '[' (a list) opened at column 8 is never closed "
        "(the parser stopped at column 13: expected ',' or ']', but got '}')",
    ),
    "list ending in a comma": (
        "hosts: [\n  a,\n  b,\n",
        1,
        "YAML syntax error: '[' (a list) opened at column 8 is never closed "
        "(the parser stopped at the end of the file: expected the node content, but found "
        "'<stream end>')",
    ),
    "innermost of nested flows": (
        "hosts: [a, {name: b, tags: [x\n",
        1,
        "YAML syntax error: '[' (a list) opened at column 28 is never closed "
        "(the parser stopped at the end of the file: expected ',' or ']', but got "
        "'<stream end>')",
    ),
    "quote running into a document separator": (
        'hosts:\n  - "a\n---\n  - b"\n',
        2,
        "YAML syntax error: '\"' (a quoted string) opened at column 5 is never closed "
        "(the parser stopped at line 3, column 1: found unexpected document separator)",
    ),
}


@pytest.mark.parametrize("case", sorted(UNCLOSED))
def test_unclosed_construct_is_named_where_it_opened(tmp_path: Path, case: str) -> None:
    text, line, message = UNCLOSED[case]
    error = error_of(tmp_path, text)
    assert error.line == line
    assert error.line <= len(text.splitlines())
    assert str(error) == f"{tmp_path / 'hosts.yaml'}:{line}: {message}"


def test_the_three_line_file_of_the_report(tmp_path: Path) -> None:
    # Issue 23: this file was reported at line 4 of 3.
    error = error_of(tmp_path, "hosts:\n  - node0\n  - [node1, node2\n")
    assert error.line == 3
    assert "'[' (a list) opened at column 5 is never closed" in error.detail
    assert "line 4" not in str(error)


OTHER = {
    "duplicate key: the second one": (
        "hosts:\n  - name: a\n    address: 1\n    address: 2\n",
        4,
        'YAML syntax error: found duplicate key "address" with value "2" (original value: "1")',
    ),
    "unknown escape: where it is": (
        'hosts:\n  - "a\\q"\n',
        2,
        "YAML syntax error: found unknown escape character 'q'",
    ),
    "a stray closing bracket is not an unclosed one": (
        "hosts: [a, b]]\n",
        1,
        "YAML syntax error: expected <block end>, but found ']'",
    ),
}


@pytest.mark.parametrize("case", sorted(OTHER))
def test_other_syntax_errors_keep_the_parsers_position(tmp_path: Path, case: str) -> None:
    text, line, message = OTHER[case]
    error = error_of(tmp_path, text)
    assert str(error) == f"{tmp_path / 'hosts.yaml'}:{line}: {message}"
