"""The dense grid's blocks join their segments (fewer for Textual's filter, the
compositor and the terminal) without changing what any cell looks like.

Views: the 256-host fixtures (a captured 8 x H100 nvidia-smi table, figures set per
host, four jobs, hot GPUs, down hosts).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from dense_fixtures import dense_inventory, dense_views
from rich.segment import Segment
from rich.style import Style
from textual.theme import BUILTIN_THEMES

from console.probe.models import GpuSample
from console.ui.attention import DEFAULT_THRESHOLDS
from console.ui.widgets.gpu_grid_layout import GridShape, JobLetters, cell_of
from console.ui.widgets.gpu_grid_paint import GridPalette, paint_block


def _cells(segments: list[Segment]) -> list[tuple[str, Style | None]]:
    return [(ch, s.style) for s in segments for ch in s.text]


def _looks_same(a: tuple[str, Style | None], b: tuple[str, Style | None]) -> bool:
    (char_a, style_a), (char_b, style_b) = a, b
    if char_a != char_b:
        return False
    if style_a == style_b:
        return True
    # A space shows only its background, unless it is reversed or underlined.
    assert style_a is not None and style_b is not None
    return (
        char_a == " "
        and style_a.bgcolor == style_b.bgcolor
        and not (style_a.reverse or style_b.reverse or style_a.underline or style_b.underline)
    )


def _one_per_cell(
    name: str,
    palette: GridPalette,
    shape: GridShape,
    letters: JobLetters,
    view_gpus: tuple[GpuSample, ...],
    cursor: bool,
) -> list[tuple[str, Style | None]]:
    """What a live host's block must look like, painted the plain way: the name, a
    space, then each GPU's glyphs in its level's style and its mark in its own."""
    base = palette.base
    name_style = base + palette.host + (Style(reverse=True) if cursor else Style())
    out: list[tuple[str, Style | None]] = [(ch, name_style) for ch in f"{name:<{shape.name_width}}"]
    out.append((" ", base))
    for gpu in view_gpus[: shape.gpus]:
        cell = cell_of(gpu, "util", letters, DEFAULT_THRESHOLDS)
        style = (
            palette.not_reported_on_base
            if cell.level is None
            else palette.heat_on_base[0][cell.level]
        )
        out += [(cell.glyph, style)] * (shape.cell_width - 1)
        if cell.marker == "!":
            out.append(("!", palette.attention_on_base))
        elif cell.job is not None:
            out.append((cell.marker, palette.jobs_on_base[letters.index(cell.job) % 6]))
        else:
            out.append((" ", base))
    out += [(" ", base)] * ((shape.gpus - min(len(view_gpus), shape.gpus)) * shape.cell_width + 1)
    return out


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light"])
def test_blocks_look_as_painted_cell_by_cell_with_fewer_segments(theme: str) -> None:
    palette = GridPalette.of(BUILTIN_THEMES[theme], {})
    shape = GridShape.fit(200, 50, 7, 8, 256)
    views = dense_views(1)
    letters = JobLetters()
    joined = painted = 0
    for index, host in enumerate(dense_inventory().hosts):
        view = views.get(host.name)
        if view is None or not view.live or view.sample is None:
            continue
        cursor = index % 31 == 0
        block = paint_block(
            host.name,
            view,
            None,
            palette,
            shape=shape,
            metric="util",
            cursor=cursor,
            slurm=(),
            letters=letters,
            thresholds=DEFAULT_THRESHOLDS,
        )
        want = _one_per_cell(host.name, palette, shape, letters, view.sample.gpus, cursor)
        got = _cells(block)
        assert len(got) == len(want), host.name
        bad = [i for i, pair in enumerate(zip(got, want, strict=True)) if not _looks_same(*pair)]
        assert not bad, f"{host.name}: cell {bad[0]} is {got[bad[0]]}, painted {want[bad[0]]}"
        joined += len(block)
        painted += 2 + 2 * len(view.sample.gpus[: shape.gpus]) + 1  # one segment a part
        if cursor:  # the reversed name keeps its own segment: its space is not reversed
            assert block[0].text.strip() == host.name and block[0].style and block[0].style.reverse
            assert block[1].text.startswith(" ") and not (block[1].style and block[1].style.reverse)
    assert joined < 0.75 * painted


def test_an_idle_host_is_its_name_and_one_run_of_cells() -> None:
    palette = GridPalette.of(BUILTIN_THEMES["textual-dark"], {})
    shape = GridShape.fit(200, 50, 7, 8, 256)
    views = dense_views(0)
    idle = next(
        v
        for v in views.values()
        if v.live and v.sample and not any(g.processes for g in v.sample.gpus)
    )
    assert idle.sample is not None
    gpus = tuple(replace(g, utilization_gpu=0.0, temperature_c=40.0) for g in idle.sample.gpus)
    view = replace(idle, sample=replace(idle.sample, gpus=gpus))
    block = paint_block(
        view.name,
        view,
        None,
        palette,
        shape=shape,
        metric="util",
        cursor=False,
        slurm=(),
        letters=JobLetters(),
        thresholds=DEFAULT_THRESHOLDS,
    )
    assert len(block) == 2, block  # painted one by one: 19 segments
    assert "".join(s.text for s in block).rstrip().endswith("·")
