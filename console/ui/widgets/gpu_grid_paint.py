"""How the dense GPU view paints: a theme's colours (:class:`GridPalette`), one host's
block of segments (:func:`paint_block`), and the legend and jobs lines under the grid.
Pure functions of their arguments; :mod:`console.ui.widgets.gpu_grid` keeps the blocks
and lines it made and decides what to repaint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.color import Color
from textual.theme import Theme

from console.display import clip
from console.jobs.slurm.queue import SlurmJobOnNode
from console.probe.models import HostView
from console.transport.base import HostState, HostStatus
from console.ui.attention import Thresholds, health_of
from console.ui.overview import count, slurm_gpu_labels
from console.ui.theming import state_colour
from console.ui.widgets.gpu_grid_layout import (
    ATTENTION_MARK,
    GAP,
    HEALTH_FAIL_MARK,
    LEVEL_LIMITS,
    NOT_REPORTED_GLYPH,
    SHADES,
    GridShape,
    JobLetters,
    cell_of,
)


@dataclass(frozen=True, slots=True)
class GridPalette:
    """Colours of one theme, made once per theme: heat levels, job letters, marks."""

    name: str
    base: Style
    heat: tuple[tuple[Style, ...], ...]  # per metric (util, memory): a style per level
    not_reported: Style
    attention: Style
    jobs: tuple[Style, ...]
    host: Style
    down: Style
    heading: Style
    # The same styles laid on ``base``, made once: adding styles per cell was most of
    # a block's painting.
    heat_on_base: tuple[tuple[Style, ...], ...]
    not_reported_on_base: Style
    attention_on_base: Style
    jobs_on_base: tuple[Style, ...]

    @classmethod
    def of(cls, theme: Theme, variables: Mapping[str, str]) -> GridPalette:
        def colour(key: str, fallback: str) -> Color:
            value = variables.get(key) or fallback
            try:
                return Color.parse(value)
            except Exception:  # a variable such as "auto 60%": not a colour by itself
                return Color.parse(fallback)

        background = colour("background", "#000000" if theme.dark else "#ffffff")
        foreground = colour("foreground", "#e0e0e0" if theme.dark else "#202020")
        muted = background.blend(foreground, 0.45)

        def ramp(top: Color, last: Color) -> tuple[Style, ...]:
            steps = [background.blend(top, share) for share in (0.5, 0.72, 0.9)]
            return tuple(
                Style(color=c.rich_color) for c in (muted, *steps, last)
            )  # the top level its own colour: busy (or full) reads at once

        primary = colour("primary", "#4A9FE0")
        secondary = colour("secondary", "#2D6A9F")
        warning = colour("warning", "#E7B339")
        util = ramp(primary, colour("accent", "#EFA040"))
        memory = ramp(secondary.blend(primary, 0.5), warning)
        jobs = tuple(
            Style(color=colour(key, "#ffffff").rich_color, bold=True)
            for key in ("success", "accent", "primary", "secondary", "warning", "foreground")
        )
        down = Color.parse(state_colour(theme, "down"))
        base = Style(color=foreground.rich_color, bgcolor=background.rich_color)
        not_reported = Style(color=muted.rich_color, dim=True)
        attention = Style(color=colour("error", "#DF5561").rich_color, bold=True)
        return cls(
            name=theme.name,
            base=base,
            heat=(util, memory),
            not_reported=not_reported,
            attention=attention,
            jobs=jobs,
            host=Style(bold=True),
            down=Style(color=down.rich_color),
            heading=Style(bold=True, underline=True),
            heat_on_base=tuple(tuple(base + level for level in ramp) for ramp in (util, memory)),
            not_reported_on_base=base + not_reported,
            attention_on_base=base + attention,
            jobs_on_base=tuple(base + job for job in jobs),
        )


def legend(palette: GridPalette, metric: str, sort: str, group: str) -> Text:
    """The line under the grid: what a glyph, a letter and ! mean; sort and group."""
    text = Text(no_wrap=True, overflow="ellipsis")
    styles = palette.heat[1 if metric == "memory" else 0]
    text.append("memory used " if metric == "memory" else "utilization ", style="bold")
    bounds = [0.0, *LEVEL_LIMITS]
    for index, glyph in enumerate(SHADES):
        low = round(bounds[index] * 100)
        label = f"≥{low}%" if index == len(SHADES) - 1 else f"<{round(LEVEL_LIMITS[index] * 100)}%"
        text.append(glyph * 2, style=styles[index])
        text.append(f" {label}  ")
    text.append(NOT_REPORTED_GLYPH * 2, style=palette.not_reported)
    text.append(" n/r   ")
    text.append(ATTENTION_MARK, style=palette.attention)
    text.append(" needs attention   ")
    text.append(HEALTH_FAIL_MARK, style=palette.attention)
    text.append(" health check fails   ")
    text.append("a-z", style=palette.jobs[0])
    text.append(" job (listed below)   ")
    text.append(f"m: {'utilization' if metric == 'memory' else 'memory'}  ")
    text.append(f"s: sort ({sort})  b: group ({group})", style="dim")
    return text


def jobs_text(palette: GridPalette, jobs: Sequence[tuple[str, int]], letters: JobLetters) -> Text:
    """The jobs line under the legend: each job's letter (coloured as in the cells),
    name and GPUs held, most GPUs first."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if not jobs:
        text.append("no distconsole job holds a GPU", style="dim")
        return text
    text.append("jobs ", style="bold")
    for job, held in jobs:
        mark = letters.letter(job)
        text.append(mark, style=palette.jobs[letters.index(job) % len(palette.jobs)])
        text.append(f" {job} {count(held, 'GPU')}   ")
    return text


def paint_block(
    name: str,
    view: HostView | None,
    status: HostStatus | None,
    palette: GridPalette,
    *,
    shape: GridShape,
    metric: str,
    cursor: bool,
    slurm: tuple[SlurmJobOnNode, ...],
    letters: JobLetters,
    thresholds: Thresholds,
) -> list[Segment]:
    """One host's block: its name (reversed under the cursor), then a cell per GPU with
    its mark, or what keeps it from having cells (connecting, down, no sample)."""
    base = palette.base
    live = view is not None and view.live and view.sample is not None
    name_style = base + (palette.host if live else palette.down)
    if cursor:
        name_style += Style(reverse=True)
    label = f"{clip(name, shape.name_width):<{shape.name_width}}"
    # Blanks ride in the segment before them where that looks the same (a space shows
    # only the background, which every style here shares) and equal styles join: a
    # 256-host grid had 114 segments a line, and Textual's colour filter, the compositor
    # and the terminal's output each pay per segment.
    segments = _Joined()
    if cursor:
        segments.add(label, name_style)
        segments.add(" ", base)
    else:
        segments.add(label + " ", name_style)
    cells_width = shape.gpus * shape.cell_width
    health = health_of(view) if live else {}
    stuck = health.get(None) if live and view is not None and view.sample is not None else None
    if stuck is not None and stuck.state == "fail" and not view.sample.gpus:  # type: ignore[union-attr]
        # Live, but its GPUs do not answer: said, never a blank block.
        note = f"✗ {stuck.reasons[0] if stuck.reasons else 'fail'}"
        segments.add(f"{clip(note, cells_width):<{cells_width}}", base + palette.down)
    elif not live:
        state = view.state if view is not None else (status.state if status else None)
        if state is None or state is HostState.CONNECTING:
            note = "… connecting"
        elif state is HostState.UP:
            note = "… no sample yet" if view is None or not view.stale else "✗ no sample lately"
        else:
            note = f"✗ {state.value}"
        style = palette.not_reported if note.startswith("…") else palette.down
        segments.add(f"{clip(note, cells_width):<{cells_width}}", base + style)
    else:
        assert view is not None and view.sample is not None
        heat = palette.heat_on_base[1 if metric == "memory" else 0]
        jobs = palette.jobs_on_base
        gpus = view.sample.gpus
        held = slurm_gpu_labels(slurm) if slurm else None
        glyph_count = shape.cell_width - 1
        for gpu in gpus[: shape.gpus]:
            cell = cell_of(gpu, metric, letters, thresholds, held, health.get(gpu.index))
            style = palette.not_reported_on_base if cell.level is None else heat[cell.level]
            if cell.marker == " ":
                segments.add(cell.glyph * glyph_count + " ", style)
                continue
            segments.add(cell.glyph * glyph_count, style)
            if cell.marker in (ATTENTION_MARK, HEALTH_FAIL_MARK):
                segments.add(cell.marker, palette.attention_on_base)
            elif cell.job is not None:
                segments.add(cell.marker, jobs[letters.index(cell.job) % len(jobs)])
            else:
                segments.add(cell.marker, base)
        missing = shape.gpus - min(len(gpus), shape.gpus)
        if missing:
            segments.blank(" " * missing * shape.cell_width, base)
    segments.blank(" " * GAP, base)
    return segments.done()


class _Joined:
    """Segments in the making, joined where the terminal would show the same."""

    def __init__(self) -> None:
        self._texts: list[str] = []
        self._styles: list[Style] = []

    def add(self, text: str, style: Style) -> None:
        if self._styles and self._styles[-1] is style:
            self._texts[-1] += text
        else:
            self._texts.append(text)
            self._styles.append(style)

    def blank(self, spaces: str, style: Style) -> None:
        """Spaces in ``style``: in the segment before them, unless that one shows its
        spaces differently (reversed or underlined)."""
        last = self._styles[-1] if self._styles else None
        if last is not None and not last.reverse and not last.underline:
            self._texts[-1] += spaces
        else:
            self.add(spaces, style)

    def done(self) -> list[Segment]:
        return [Segment(t, s) for t, s in zip(self._texts, self._styles, strict=True)]
