"""A log view that renders only the rows on screen.

``RichLog.write`` renders every line as it is written (hundreds of microseconds each,
and it copies its whole line list once ``max_lines`` is reached), so rebuilding a
5000-line view after a key press took over a second. :class:`LazyLogView` keeps the
items (log lines, context lines, gaps) and turns one into a Rich ``Text`` and a strip
only when its row is painted; adding or replacing items costs a list operation. It is
a ``RichLog`` (same id, CSS, ``wrap`` switch, scrolling); with ``wrap`` on, row heights
depend on the rendering, so the newest ``WRAP_ITEMS`` items are rendered eagerly with
RichLog's own ``write``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.text import Text
from textual.cache import LRUCache
from textual.geometry import Size
from textual.strip import Strip
from textual.widgets import RichLog

WRAP_ITEMS = 1000

Renderer = Callable[[Any], Text]


class LazyLogView(RichLog):
    def __init__(self, *, max_lines: int, **kwargs: Any) -> None:
        super().__init__(max_lines=max_lines, **kwargs)
        self.items: list[Any] = []
        self.renderer: Renderer = lambda item: Text(str(item))
        self.measure: Callable[[Any], int] = lambda item: len(str(item))
        self._strips: LRUCache[tuple[int, int, int], Strip] = LRUCache(2048)
        self._first = 0  # number of the item at index 0 (items dropped from the front)
        self._widest = 0

    # -- items -------------------------------------------------------------------------

    def show(self, items: Sequence[Any], renderer: Renderer, measure: Callable[[Any], int]) -> None:
        """Replace everything shown (after a search, a rank choice, a filter...)."""
        self.renderer, self.measure = renderer, measure
        self.items = list(items[-self._limit :])
        self._first = 0
        self._strips.clear()
        self._widest = max(map(measure, self.items), default=0)
        if self.wrap:
            super().clear()
            for item in self.items[-WRAP_ITEMS:]:
                super().write(renderer(item), scroll_end=False)
        else:
            self.lines.clear()
            self._line_cache.clear()
            self._update_size()

    def add(self, items: Sequence[Any], *, scroll_end: bool) -> None:
        """Append items at the bottom; the oldest fall out beyond ``max_lines``. With
        ``scroll_end`` the view keeps to the bottom if it was there."""
        if not items:
            return
        # Scrolled up to read: new lines must not pull the view back down.
        scroll_end = scroll_end and self.scroll_offset.y >= self.max_scroll_y
        self.items.extend(items)
        # The newest rows are the ones on screen; measuring a burst's every line costs.
        self._widest = max(self._widest, max(map(self.measure, items[-256:])))
        over = len(self.items) - self._limit
        if over > 0:
            # Exactly the limit: once full, the virtual size stays put, so an add is a
            # repaint of this widget, not a layout of the screen.
            del self.items[:over]
            self._first += over
        if self.wrap:
            for item in items[-WRAP_ITEMS:]:
                super().write(self.renderer(item), scroll_end=scroll_end)
            return
        self._update_size()
        if scroll_end:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    @property
    def _limit(self) -> int:
        return self.max_lines or 5000

    def _update_size(self) -> None:
        self.virtual_size = Size(max(self._widest, 1), len(self.items))
        self.refresh()

    def clear(self) -> LazyLogView:
        self.items = []
        self._strips.clear()
        self._widest = 0
        super().clear()
        return self

    def watch_wrap(self, _old: bool, _new: bool) -> None:
        # Switching modes: re-show what is there in the new mode.
        if self.is_mounted:
            self.show(self.items, self.renderer, self.measure)

    # -- painting ----------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        if self.wrap:
            return super().render_line(y)
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        index = scroll_y + y
        if index >= len(self.items):
            return Strip.blank(width, self.rich_style)
        key = (self._first + index, scroll_x, width)
        strip = self._strips.get(key)
        if strip is None:
            text = self.renderer(self.items[index])
            strip = Strip(list(text.render(self.app.console)))
            strip = strip.crop_extend(scroll_x, scroll_x + width, self.rich_style)
            strip = strip.apply_style(self.rich_style)
            self._strips[key] = strip
        return strip

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()
