"""The dense GPU view: one cell per GPU, several hosts a line, a cursor on a host.

A Line API widget (ScrollView + render_line): only the lines on screen are painted, a
host's block of segments is kept while its view, the metric and the theme stay the same,
and a line's strip is kept while its blocks are the same objects. A batch that changed
some hosts repaints only their lines; the order is re-made only when it can have moved
(a sort by a figure, a group by job) or the filter changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from rich.segment import Segment
from textual.binding import Binding
from textual.events import Click, Resize
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console.inventory import Host
from console.jobs.slurm.queue import SlurmJobOnNode
from console.probe.models import HostView
from console.transport.base import HostStatus
from console.ui.attention import DEFAULT_THRESHOLDS, Thresholds
from console.ui.widgets.gpu_grid_layout import GridLines, GridShape, JobLetters, arrange
from console.ui.widgets.gpu_grid_paint import GridPalette, paint_block

# Sorts and groups whose order moves with the figures: re-made on every batch.
MOVING_SORTS = ("util", "memory", "temp", "job")


class GpuGrid(ScrollView, can_focus=True):
    """Every shown host's GPUs as cells; the cursor host is what Enter opens."""

    BINDINGS = [
        Binding("left", "cursor(-1, 0)", "Previous host", show=False),
        Binding("right", "cursor(1, 0)", "Next host", show=False),
        Binding("home", "cursor_edge(0)", "First host", show=False),
        Binding("end", "cursor_edge(1)", "Last host", show=False),
    ]

    class HostClicked(Message):
        def __init__(self, host: str) -> None:
            super().__init__()
            self.host = host

    def __init__(
        self,
        hosts: Sequence[Host],
        views: Mapping[str, HostView],
        statuses: Mapping[str, HostStatus],
        *,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.hosts = list(hosts)
        self.views = views  # the store's: read, never written
        self.statuses = statuses
        self.slurm: Mapping[str, tuple[SlurmJobOnNode, ...]] = {}  # the store's, per host
        self.thresholds = thresholds
        self.metric = "util"
        self.sort = "name"
        self.group = "none"
        self.shown: Callable[[Host], bool] = lambda _host: True
        self.health_first = False  # the attention view: hosts with failing GPUs first
        self.letters = JobLetters()
        self.cursor: str | None = None
        self.shape = GridShape.fit(200, 50, 8, 8, len(self.hosts))
        self.grid = GridLines((), {}, ())
        self._palette: GridPalette | None = None
        # host -> (view, status, metric, shape, palette name, cursor, segments)
        self._blocks: dict[str, tuple[object, ...]] = {}
        # line -> (row names, block objects, width, strip)
        self._strips: dict[int, tuple[tuple[object, ...], int, Strip]] = {}

    # -- data in -------------------------------------------------------------------------

    def take(self, changed: Mapping[str, object]) -> None:
        """Hosts whose view (or Slurm jobs) changed (already in the store): repaint
        their lines, or re-make the order when it can have moved."""
        if not changed:
            return
        if self._gpus() != self.shape.gpus or self.sort in MOVING_SORTS or self.group == "job":
            self.rearrange()
            return
        for name in changed:
            where = self.grid.where.get(name)
            if where is not None:
                self.refresh_line(where[0])

    def set_status(self, name: str) -> None:
        where = self.grid.where.get(name)
        if where is not None:
            self.refresh_line(where[0])

    def configure(
        self,
        *,
        metric: str | None = None,
        sort: str | None = None,
        group: str | None = None,
        shown: Callable[[Host], bool] | None = None,
    ) -> None:
        if metric is not None:
            self.metric = metric
        if sort is not None:
            self.sort = sort
        if group is not None:
            self.group = group
        if shown is not None:
            self.shown = shown
        self.rearrange()

    def rearrange(self) -> None:
        """Filter, sort, group, fit: the lines and where each host is."""
        groups = arrange(
            self.hosts,
            self.views,
            sort=self.sort,
            group=self.group,
            shown=self.shown,
            slurm=self.slurm,
            health_first=self.health_first,
        )
        count = sum(len(hosts) for _, hosts in groups)
        headings = sum(1 for heading, hosts in groups if heading is not None and hosts)
        longest = max((len(h.name) for h in self.hosts), default=4)
        width = self.scrollable_content_region.width or self.size.width or 200
        height = self.size.height or 50
        shape = GridShape.fit(width, height, longest, self._gpus(), count, headings)
        grid = GridLines.build(groups, shape.per_row)
        if shape == self.shape and grid == self.grid:
            return
        self.shape, self.grid = shape, grid
        self._strips.clear()
        if self.cursor not in grid.where:
            self.cursor = grid.order[0] if grid.order else None
        self.virtual_size = Size(shape.per_row * shape.block_width, len(grid.lines))
        self.refresh()
        self._scroll_to_cursor()

    def _gpus(self) -> int:
        most = 0
        for view in self.views.values():
            if view.sample is not None:
                most = max(most, len(view.sample.gpus))
        return most or 8

    def on_resize(self, _event: Resize) -> None:
        self.rearrange()

    # -- cursor --------------------------------------------------------------------------

    def move_cursor(self, dx: int, dy: int) -> None:
        target = self.grid.neighbour(self.cursor, dx, dy)
        self.set_cursor(target)

    def set_cursor(self, host: str | None) -> None:
        if host == self.cursor or (host is not None and host not in self.grid.where):
            return
        before = self.grid.where.get(self.cursor or "")
        self.cursor = host
        if before is not None:
            self.refresh_line(before[0])
        if host is not None:
            self.refresh_line(self.grid.where[host][0])
        self._scroll_to_cursor()

    def _scroll_to_cursor(self) -> None:
        where = self.grid.where.get(self.cursor or "")
        if where is None:
            return
        line = where[0]
        top = round(self.scroll_y)
        height = self.scrollable_content_region.height or self.size.height
        if line < top:
            self.scroll_to(y=line, animate=False)
        elif height and line >= top + height:
            self.scroll_to(y=line - height + 1, animate=False)

    def action_cursor(self, dx: int, dy: int) -> None:
        self.move_cursor(dx, dy)

    def action_cursor_edge(self, end: int) -> None:
        if self.grid.order:
            self.set_cursor(self.grid.order[-1 if end else 0])

    def on_click(self, event: Click) -> None:
        line = event.y + round(self.scroll_y)
        column = (event.x + round(self.scroll_x)) // self.shape.block_width
        if 0 <= line < len(self.grid.lines):
            row = self.grid.lines[line][1]
            if 0 <= column < len(row):
                self.set_cursor(row[column])
                self.post_message(self.HostClicked(row[column]))

    # -- painting ------------------------------------------------------------------------

    def palette(self) -> GridPalette:
        theme = self.app.current_theme
        if self._palette is None or self._palette.name != theme.name:
            self._palette = GridPalette.of(theme, self.app.theme_variables)
            self._blocks.clear()
            self._strips.clear()
        return self._palette

    def render_line(self, y: int) -> Strip:
        palette = self.palette()
        width = self.size.width
        index = y + round(self.scroll_y)
        if not 0 <= index < len(self.grid.lines):
            return Strip.blank(width, palette.base)
        heading, row = self.grid.lines[index]
        if heading is not None:
            strip = Strip([Segment(heading, palette.base + palette.heading)])
        else:
            blocks = tuple(self._block(name, palette) for name in row)
            kept = self._strips.get(index)
            if kept is not None and kept[1] == width and _same(kept[0], blocks):
                strip = kept[2]
            else:
                segments = [s for block in blocks for s in block]
                strip = Strip(segments)
                self._strips[index] = (blocks, width, strip)
        scroll_x = round(self.scroll_x)
        return strip.crop(scroll_x, scroll_x + width).extend_cell_length(width, palette.base)

    def _block(self, name: str, palette: GridPalette) -> tuple[Segment, ...]:
        view = self.views.get(name)
        status = self.statuses.get(name) if view is None or not view.live else None
        slurm = self.slurm.get(name, ())
        key = (view, status, slurm, self.metric, self.shape, palette.name, name == self.cursor)
        kept = self._blocks.get(name)
        if kept is not None and kept[:-1] == key:
            return kept[-1]  # type: ignore[return-value]
        block = tuple(
            paint_block(
                name,
                view,
                status,
                palette,
                shape=self.shape,
                metric=self.metric,
                cursor=name == self.cursor,
                slurm=slurm,
                letters=self.letters,
                thresholds=self.thresholds,
            )
        )
        self._blocks[name] = (*key, block)
        return block

    # -- for the screen and tests ----------------------------------------------------------

    def visible_hosts(self) -> list[str]:
        return list(self.grid.order)

    def line_text(self, index: int) -> str:
        """The plain text of a grid line (tests read what a person would)."""
        palette = self.palette()
        heading, row = self.grid.lines[index]
        if heading is not None:
            return heading
        return "".join(s.text for name in row for s in self._block(name, palette))


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))
