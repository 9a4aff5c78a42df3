"""Rich-specific cell helpers; plain values are formatted by :mod:`console.display`."""

from __future__ import annotations

from rich.text import Text

from console import display


def plain(value: object) -> Text:
    """A table cell shown as is: DataTable parses plain strings as markup, so a reason
    such as "[Errno 111] Connection refused" would lose its brackets. A host's value
    (a job or GPU name) draws nothing on the terminal either (``display.plain``)."""
    return Text(display.plain(str(value)))
