"""Placeholders nvidia-smi prints for a figure it does not have become None."""

from __future__ import annotations

import pytest

from console.probe import values

PLACEHOLDERS = [
    "[N/A]",
    "N/A",
    "[Not Supported]",
    "ERR!",
    "[Requested functionality has been deprecated]",
    "Requested functionality has been deprecated",
    "[Unknown Error]",
    "[GPU is lost]",
    "[Function Not Found]",
    "",
    "   ",
]


@pytest.mark.parametrize("raw", PLACEHOLDERS)
def test_placeholders_are_not_reported(raw: str) -> None:
    assert values.text(raw) is None
    assert values.number(raw) is None
    assert values.integer(raw) is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("52", 52.0),
        ("52 %", 52.0),
        ("38%", 38.0),
        ("627.40 W", 627.4),
        ("32362 MiB", 32362.0),
        ("2 GiB", 2048.0),
        ("31 C", 31.0),
        ("1980 MHz", 1980.0),
        ("0", 0.0),
    ],
)
def test_numbers_with_units(raw: str, expected: float) -> None:
    assert values.number(raw) == expected


def test_words_are_not_numbers() -> None:
    assert values.number("Default") is None
    assert values.number("P0") is None
    assert values.text(" P0 ") == "P0"
