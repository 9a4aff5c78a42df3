"""A log view that renders only the rows on screen, wrapped or not (Textual's line API).

``RichLog.write`` renders every line as it is written (hundreds of microseconds each),
so rebuilding a 5000-line view after a key press took over a second, and its wrapping
puts a long line's continuation under the host/rank prefix. :class:`LazyLogView` keeps
the items (log lines, context lines, gaps) and turns one into a Rich ``Text`` and a
strip only when its row is painted; adding or replacing items costs a list operation.

Wrapped, a row holds a fixed number of characters (a fold, not a word wrap), so how
many rows an item takes is arithmetic on its measured width: the view stays lazy with
wrap on, and a resize recounts rows without rendering anything. Continuation rows start
under the text, after ``indent`` cells that repeat the prefix column's rule.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Any

from rich.text import Text
from textual.cache import LRUCache
from textual.events import Resize
from textual.geometry import Size
from textual.reactive import var
from textual.scroll_view import ScrollView
from textual.strip import Strip

Renderer = Callable[[Any], Text]
Measure = Callable[[Any], int]

# Narrower than this after the indent, continuation rows start at the left edge instead.
MIN_BODY = 12


class LazyLogView(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    LazyLogView {
        background: $surface;
        color: $foreground;
        overflow-y: scroll;
        &:focus {
            background-tint: $foreground 5%;
        }
    }
    """

    wrap: var[bool] = var(False)

    def __init__(
        self,
        *,
        max_lines: int,
        wrap: bool = False,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.max_lines = max_lines
        self.items: list[Any] = []
        self.renderer: Renderer = lambda item: Text(str(item))
        self.measure: Measure = lambda item: len(str(item))
        self.indent = 0  # cells of prefix before an item's text (continuation rows skip them)
        self._strips: LRUCache[tuple[int, int, int, int, int], Strip] = LRUCache(2048)
        self._texts: LRUCache[int, Text] = LRUCache(512)
        self._first = 0  # number of the item at index 0 (items dropped from the front)
        self._widest = 0
        # Wrapped: cumulative row counts per item, less ``_row_base`` (rows dropped in front).
        self._ends: list[int] = []
        self._row_base = 0
        self._fold_width = 0  # the width the row counts were made for
        # At the bottom (the last scroll said so): kept there when the view shrinks
        # (the steps table grows, the summary wraps) and when lines are added.
        self._at_end = True
        self.set_reactive(LazyLogView.wrap, wrap)

    # -- items -------------------------------------------------------------------------

    def show(
        self, items: Sequence[Any], renderer: Renderer, measure: Measure, indent: int = 0
    ) -> None:
        """Replace everything shown (after a search, a rank choice, a filter...)."""
        self.renderer, self.measure, self.indent = renderer, measure, indent
        self.items = list(items[-self.max_lines :])
        self._first = 0
        self._strips.clear()
        self._texts.clear()
        self._widest = max(map(measure, self.items), default=0)
        self._count_rows()
        self._update_size()

    def add(self, items: Sequence[Any], *, scroll_end: bool) -> None:
        """Append items at the bottom; the oldest fall out beyond ``max_lines``. With
        ``scroll_end`` the view keeps to the bottom if it was there."""
        if not items:
            return
        # Scrolled up to read: new lines must not pull the view back down.
        scroll_end = scroll_end and self._at_end
        self.items.extend(items)
        # The newest rows are the ones on screen; measuring a burst's every line costs.
        self._widest = max(self._widest, max(map(self.measure, items[-256:])))
        if self.wrap:
            last = self._ends[-1] if self._ends else self._row_base
            self._ends.extend(accumulate(map(self._rows_of, items), initial=last))
            del self._ends[len(self._ends) - len(items) - 1]  # the initial value
        over = len(self.items) - self.max_lines
        if over > 0:
            # Exactly the limit: once full, the virtual size stays put (unwrapped), so an
            # add is a repaint of this widget, not a layout of the screen.
            del self.items[:over]
            self._first += over
            if self.wrap:
                self._row_base = self._ends[over - 1]
                del self._ends[:over]
        self._update_size()
        if scroll_end:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def clear(self) -> LazyLogView:
        self.items = []
        self._ends = []
        self._row_base = 0
        self._strips.clear()
        self._texts.clear()
        self._widest = 0
        self._update_size()
        return self

    def row_of(self, index: int) -> int:
        """The first row of item ``index`` (for scrolling to an item)."""
        if not self.wrap or index <= 0:
            return max(0, index)
        return self._ends[min(index, len(self._ends)) - 1] - self._row_base

    @property
    def row_count(self) -> int:
        if not self.wrap:
            return len(self.items)
        return (self._ends[-1] - self._row_base) if self._ends else 0

    # -- rows when wrapped -------------------------------------------------------------

    def _body_indent(self, width: int) -> int:
        return self.indent if width - self.indent >= MIN_BODY else 0

    def _rows_of(self, item: Any) -> int:
        width = self._fold_width
        cells = self.measure(item)
        if width <= 0 or cells <= width:
            return 1
        body = width - self._body_indent(width)
        return 1 + -(-(cells - width) // body)

    def _count_rows(self) -> None:
        self._row_base = 0
        if not self.wrap:
            self._ends = []
            return
        self._fold_width = self.scrollable_content_region.width
        self._ends = list(accumulate(map(self._rows_of, self.items)))

    def _update_size(self) -> None:
        width = 1 if self.wrap else max(self._widest, 1)
        self.virtual_size = Size(width, self.row_count)
        self.refresh()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self._at_end = new_value >= self.max_scroll_y

    def watch_show_horizontal_scrollbar(self, _old: bool, _new: bool) -> None:
        # A line wider than the view brings a scrollbar that takes the bottom row.
        if self._at_end:
            self.call_after_refresh(self.scroll_end, animate=False, x_axis=False)

    def on_resize(self, _event: Resize) -> None:
        if self.wrap and self.scrollable_content_region.width != self._fold_width:
            self._count_rows()
            self._strips.clear()
            self._update_size()
        if self._at_end:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def watch_wrap(self, _old: bool, _new: bool) -> None:
        # Switching modes: count rows for the new mode and repaint what is there.
        self._strips.clear()
        self._count_rows()
        self._update_size()

    # -- painting ----------------------------------------------------------------------

    def _text(self, index: int) -> Text:
        number = self._first + index
        text = self._texts.get(number)
        if text is None:
            text = self.renderer(self.items[index])
            self._texts[number] = text
        return text

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        row = scroll_y + y
        if row >= self.row_count:
            return Strip.blank(width, self.rich_style)
        if self.wrap:
            index = bisect_right(self._ends, row + self._row_base)
            first = self._ends[index - 1] - self._row_base if index else 0
            part, scroll_x = row - first, 0
        else:
            index, part = row, 0
        key = (self._first + index, part, scroll_x, width, int(self.wrap))
        strip = self._strips.get(key)
        if strip is None:
            text = self._text(index)
            if self.wrap:
                text = self._fold(text, part, width)
            strip = Strip(list(text.render(self.app.console)))
            strip = strip.crop_extend(scroll_x, scroll_x + width, self.rich_style)
            strip = strip.apply_style(self.rich_style)
            self._strips[key] = strip
        return strip

    def _fold(self, text: Text, part: int, width: int) -> Text:
        """Row ``part`` of ``text`` folded at ``width``: the first row as is, the others
        indented under the text's first character."""
        if part == 0:
            return text[:width]
        indent = self._body_indent(width)
        body = width - indent
        start = width + (part - 1) * body
        row = Text(" " * (indent - 2) + "│ " if indent >= 2 else "", style="dim")
        row.append_text(text[start : start + body])
        return row

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()
