"""One host's nvidia-smi-style panel: a line per GPU (bars, figures, history), its processes.

The panel is ONE widget that renders text, not a widget per bar: 64 hosts x 8 GPUs stay
cheap to lay out, and a new sample repaints only the panels of the hosts that changed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from rich.text import Text
from textual.content import Content
from textual.dom import NoScreen
from textual.events import Resize
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.theme import Theme
from textual.visual import Visual
from textual.widget import Widget

from console import display
from console.inventory import Host
from console.probe.health import clock as at_clock
from console.probe.models import GpuSample, HostView
from console.transport.base import HostState, HostStatus
from console.ui.attention import (
    DEFAULT_THRESHOLDS,
    Thresholds,
    gpu_alerts,
    health_of,
    host_needs_attention,
)
from console.ui.widgets.gpu_columns import DEFAULT_COLUMNS, HISTORY, GpuColumns, no_sample_note
from console.ui.widgets.gpu_panel_lines import MAX_PROCESS_LINES, gpu_line, process_lines
from console.ui.widgets.gpu_text import (
    bar,
    host_figures,
    line_of,
    one_line,
    short_gpu_name,
    spark_char,
    spark_text,
    sparkline,
)
from console.ui.widgets.slow_marks import HostSlow, gpu_slow_ranks, marked_gpu_line, slow_line

__all__ = ["HostPanel", "bar", "host_figures", "short_gpu_name", "sparkline"]


class HostPanel(Widget, can_focus=True):
    """Set ``view`` (a :class:`HostView`) and the panel repaints; history grows per sample.

    Cheap at 64 hosts x 8 GPUs: a new sample only repaints the panel (Textual renders it
    when it is in view), its height is counted from the sample without rendering, and a
    layout happens only when that count changes. Each GPU line is kept and reused while
    its sample, sparkline and theme stay the same.
    """

    view: reactive[HostView | None] = reactive(None, always_update=True)
    attention_only: reactive[bool] = reactive(False)

    class ColumnsChanged(Message):
        """The panel's GPU columns changed (its width or the longest name): the header
        above the panels follows."""

        def __init__(self, columns: GpuColumns) -> None:
            super().__init__()
            self.columns = columns

    def __init__(
        self,
        host: Host,
        *,
        clock: Callable[[], float],
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
    ) -> None:
        super().__init__(id=f"panel-{host.name}", classes="host-panel")
        self.host = host
        self._clock = clock
        self.thresholds = thresholds
        self.history: dict[int, deque[float | None]] = {}
        # The same history as blocks, made once per sample: a wide history line is a
        # join of these, not 100+ conversions per GPU per sample.
        self._spark: dict[int, deque[str]] = {}
        self.columns = DEFAULT_COLUMNS
        self.name_width = 0  # the longest GPU name of the cluster (the screen says)
        self.status: HostStatus | None = None  # the connection's, for a panel without sample
        self._last_sample_time: float | None = None
        self._height = 1
        self._paint_deferred = False
        self._lines: tuple[tuple[object, ...], list[Text]] | None = None
        # y -> (line, width, style, strip): a strip is reused while all four match.
        self._strips: dict[int, tuple[Text, int, VisualStyle, Strip]] = {}
        # index -> (sample, sparkline, theme name, line): the line is reused while all match.
        self._rows: dict[int, tuple[GpuSample, str, str, Text, object]] = {}
        self.slow: tuple[HostSlow, ...] = ()  # the slow ranks on this host (set_slow)
        self.role = ""  # "rendezvous of JOB" (--rendezvous-host: it trains nothing; set_role)
        self.border_title = host.name

    # -- data in -------------------------------------------------------------------------

    def take(self, view: HostView) -> None:
        """A new view of this host: record history once per new sample, then repaint."""
        sample = view.sample
        if sample is not None and sample.time != self._last_sample_time and not view.stale:
            self._last_sample_time = sample.time
            for gpu in sample.gpus:
                util = gpu.utilization_gpu
                self.history.setdefault(gpu.index, deque(maxlen=HISTORY)).append(util)
                self._spark.setdefault(gpu.index, deque(maxlen=HISTORY)).append(spark_char(util))
        if self.in_view():
            self.view = view
        else:
            # Out of view: keep the data, paint when Textual next draws the panel (see
            # render_lines). Refreshing an off-screen widget makes Textual re-arrange the
            # whole screen, which at 64 hosts cost more than all the painting.
            self.set_reactive(HostPanel.view, view)
            self.watch_view(view)
            self._paint_deferred = True

    def in_view(self) -> bool:
        """Was the panel on screen (in the scroll view, displayed) at the last update?"""
        try:
            # The compositor's own record; Textual's Widget reads it the same way.
            return self in self.screen._compositor.visible_widgets
        except NoScreen:
            return False

    def render_lines(self, crop: Region) -> list[Strip]:
        if self._paint_deferred:
            # Scrolled, filtered or switched into view since its data changed: the
            # cached lines are old. refresh() drops them (and repaints once more).
            self._paint_deferred = False
            self.refresh()
        return super().render_lines(crop)

    def watch_view(self, view: HostView | None) -> None:
        down = view is not None and not view.live
        if view is None and self.status is not None:
            down = not self.status.is_up and self.status.state is not HostState.CONNECTING
        self.set_class(down, "-down")
        self._set_titles(view)
        self._check_height()

    def set_status(self, status: HostStatus | None) -> None:
        """The host's connection status: what a panel without a sample says."""
        if status == self.status:
            return
        self.status = status
        if self.view is None or self.view.sample is None:
            self.watch_view(self.view)
            self.refresh()

    def set_slow(self, marks: tuple[HostSlow, ...]) -> None:
        """The slow ranks on this host (their jobs' leaders scored them): marked on the
        host and on the GPUs their processes run on."""
        if marks != self.slow:
            self.slow = marks
            self._check_height()
            self.refresh()

    def set_role(self, role: str) -> None:
        """What this host is to the running jobs beside its GPUs (a rendezvous host)."""
        if role != self.role:
            self.role = role
            self._set_titles(self.view)

    # -- columns -------------------------------------------------------------------------

    def set_name_width(self, width: int) -> None:
        if width != self.name_width:
            self.name_width = width
            self._fit_columns()

    def on_resize(self, _event: Resize) -> None:
        self._fit_columns()

    def _fit_columns(self) -> None:
        if self.size.width <= 0:
            return
        columns = GpuColumns.fit(self.size.width, self.name_width)
        if columns != self.columns:
            self.columns = columns
            self._rows.clear()
            self.refresh()
            self.post_message(self.ColumnsChanged(columns))

    def watch_attention_only(self, _attention_only: bool) -> None:
        self._check_height()

    def needs_attention(self) -> bool:
        return self.view is not None and host_needs_attention(self.view, self.thresholds)

    # -- size ----------------------------------------------------------------------------

    def _check_height(self) -> None:
        height = self.content_lines()
        if height != self._height:
            self._height = height
            self.refresh(layout=True)

    def _shown(self, gpus: tuple[GpuSample, ...]) -> list[GpuSample]:
        if not self.attention_only:
            return list(gpus)
        health = health_of(self.view)
        return [g for g in gpus if gpu_alerts(g, self.thresholds, health.get(g.index))]

    def _host_health(self) -> Text | None:
        """A line for a health finding about the host itself (its nvidia-smi / NVML not
        answering, an Xid on a PCI address no GPU has)."""
        verdict = health_of(self.view).get(None)
        if verdict is None:
            return None
        since = f" (since {at_clock(verdict.since)})" if verdict.since is not None else ""
        mark = "✗ FAIL" if verdict.state == "fail" else "⚠ warn"
        return line_of(f"{mark} {'; '.join(verdict.reasons)}{since}", "bold")

    def content_lines(self) -> int:
        """How many lines :meth:`render` gives, counted without rendering."""
        view = self.view
        if view is None or view.sample is None:
            return 1
        gpus = view.sample.gpus
        shown = self._shown(gpus)
        count = 1 + len(shown) + (0 if gpus else 1) + (None in health_of(view)) + bool(self.slow)
        if self.attention_only and gpus and not shown:
            count += 1
        processes = sum(len(g.processes) for g in shown)
        count += min(processes, MAX_PROCESS_LINES) + (processes > MAX_PROCESS_LINES)
        return count

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        # Textual would render the panel to measure it, on every layout, in view or not.
        return self.content_lines()

    # -- rendering -----------------------------------------------------------------------

    def _set_titles(self, view: HostView | None) -> None:
        tags = f" · {', '.join(self.host.tags)}" if self.host.tags else ""
        state = (view or self.status or HostView("", HostState.CONNECTING)).state.value
        role = f" · {self.role}" if self.role else ""
        title = f"{self.host.name} · {state}{tags}{role}"
        if title != self.border_title:
            self.border_title = title
        subtitle = ""
        if view is not None:
            if not view.live:
                seen = display.ago(view.last_seen, self._clock())
                why = view.reason or ("no sample lately" if view.stale else "")
                subtitle = f"{why} · last seen {seen}" if why else f"last seen {seen}"
            elif view.sample is not None and view.sample.simulated:
                subtitle = "simulated GPUs"
            elif view.sample is not None:
                subtitle = view.sample.gpu_source
        subtitle = display.clip(subtitle, 90)
        if subtitle != self.border_subtitle:
            self.border_subtitle = subtitle

    def render(self) -> Text:
        text = Text("\n", no_wrap=True, overflow="ellipsis").join(self.lines())
        text.no_wrap, text.overflow = True, "ellipsis"
        return text

    def lines(self) -> list[Text]:
        """The panel's lines, kept until the view, the attention view or the theme changes."""
        theme = self.app.current_theme
        if self.view is None or self.view.sample is None:
            # Says how long the host has been in its state: new each paint, never kept.
            return self._make_lines(theme)
        key = (self.view, self.attention_only, theme.name, self.columns, self.slow)
        if self._lines is None or self._lines[0] != key:
            self._lines = (key, self._make_lines(theme))
        return self._lines[1]

    def _make_lines(self, theme: Theme) -> list[Text]:
        view = self.view
        if view is None or view.sample is None:
            note = no_sample_note(view, self.status, self._clock())
            return [Text(note, style="dim", no_wrap=True, overflow="ellipsis")]
        sample = view.sample
        lines = [line_of(host_figures(sample), "dim")]
        host_health = self._host_health()
        if host_health is not None:
            lines.append(host_health)
        slow_style = f"bold {theme.warning or ''}"
        if self.slow:
            lines.append(slow_line(self.slow, slow_style))
        gpus = sample.gpus
        if not gpus:
            lines.append(line_of(one_line(sample.gpu_error or "no NVIDIA GPU"), "dim italic"))
        shown = self._shown(gpus)
        for gpu in shown:
            line, ranks = self._cached_gpu_line(gpu, theme), gpu_slow_ranks(gpu, self.slow)
            lines.append(marked_gpu_line(line, ranks, slow_style) if ranks else line)
        if self.attention_only and gpus and not shown:
            lines.append(line_of("no GPU needs attention", "dim italic"))
        lines.extend(process_lines(shown))
        if not view.live:
            lines = [line.copy() for line in lines]  # GPU lines are shared with later paints
            for line in lines:
                line.stylize("dim")
        return lines

    def render_line(self, y: int) -> Strip:
        """One content line, turned into a strip on its own and kept while it is the same
        line object at the same width and style: a GPU line that did not change is not
        formatted again, and no paint splits a whole panel's text into lines."""
        if self.text_selection is not None:
            return super().render_line(y)  # a mouse selection spans lines: Textual's way
        width, style = self.size.width, self.visual_style
        lines = self.lines()
        if y >= len(lines):
            return Strip.blank(width, style.rich_style)
        line = lines[y]
        kept = self._strips.get(y)
        if kept is not None and kept[0] is line and kept[1] == width and kept[2] == style:
            return kept[3]
        content = Content.from_rich_text(line, console=self.app.console)
        strips = Visual.to_strips(self, content, width, 1, style, apply_selection=False)
        strip = strips[0] if strips else Strip.blank(width, style.rich_style)
        self._strips[y] = (line, width, style, strip)
        return strip

    def _cached_gpu_line(self, gpu: GpuSample, theme: Theme) -> Text:
        spark = spark_text(self._spark.get(gpu.index, []), self.columns.spark)
        kept = self._rows.get(gpu.index)
        verdict = health_of(self.view).get(gpu.index)
        if (
            kept is not None
            and kept[1] == spark
            and kept[2] == theme.name
            and kept[0] == gpu
            and kept[4] == verdict
        ):
            return kept[3]
        alerts = gpu_alerts(gpu, self.thresholds, verdict)
        line = gpu_line(gpu, theme, self.columns, spark, alerts)
        self._rows[gpu.index] = (gpu, spark, theme.name, line, verdict)
        return line


def panel_after(panels: Iterable[HostPanel], current: object, step: int) -> HostPanel | None:
    """The shown panel ``step`` places after ``current`` (wrapping), the first shown one
    when ``current`` is not a shown panel, None when no panel is shown."""
    shown = [p for p in panels if p.display]
    if not shown:
        return None
    if not isinstance(current, HostPanel) or current not in shown:
        return shown[0]
    return shown[(shown.index(current) + step) % len(shown)]
