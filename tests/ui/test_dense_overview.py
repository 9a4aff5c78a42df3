"""The summary line and the dense grid's order, shape and cells, as pure functions."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from dense_fixtures import dense_inventory, dense_views, name
from textual.pilot import Pilot
from ui_fixtures import FROZEN_NOW, gpu_views

from console.probe.models import GpuSample, HostView
from console.transport.base import HostState, HostStatus
from console.ui.app import DistConsoleApp
from console.ui.attention import DEFAULT_THRESHOLDS
from console.ui.gpu_history import GpuHistory
from console.ui.overview import ClusterSummary, HostTotals, summary_text
from console.ui.widgets.gpu_grid_layout import (
    GridLines,
    GridShape,
    JobLetters,
    cell_of,
    group_hosts,
    level,
    sort_hosts,
)


def test_summary_of_the_fixed_views() -> None:
    """node0: 4 GPUs of resnet-ddp (one idle under it); node1: one hot and full GPU;
    node2: 2 idle GPUs; node3 down with a stale sample."""
    views = gpu_views(0)
    totals = [HostTotals.of(v) for v in views.values()]
    summary = ClusterSummary.of(5, totals)
    assert (summary.up, summary.down, summary.waiting) == (3, 1, 1)
    assert (summary.gpus, summary.busy, summary.idle, summary.hot) == (8, 5, 3, 1)
    assert summary.attention == 2
    assert summary.jobs == (("resnet-ddp", 4),)
    assert summary.memory_total_mib == 8 * 81920.0
    text = summary_text(summary)
    assert text.startswith("5 hosts (3 up, 1 down, 1 waiting)  ·  8 GPUs: 5 busy, 3 idle, 1 hot")
    assert "jobs: resnet-ddp 4 GPUs" in text and "2 GPUs need attention" in text
    assert "jobs:" not in summary_text(summary, jobs=False)
    narrowed = summary_text(summary, attention_only=True, query="rack1")
    assert narrowed.startswith("ATTENTION VIEW (a: all)  ·  filter: 'rack1'")


def test_summary_at_256_hosts_in_tib_and_kw() -> None:
    views = dense_views()
    summary = ClusterSummary.of(256, (HostTotals.of(v) for v in views.values()))
    text = summary_text(summary)
    assert summary.gpus == 252 * 8 and "TiB" in text and " kW/" in text
    assert summary.jobs[0] == ("llama-70b", 1024)
    assert text.endswith("+0 more") is False and "eval-sweep 32 GPUs" in text


def test_a_host_without_a_view_counts_by_its_connection() -> None:
    refused = HostStatus("n", HostState.AUTH_FAILED, reason="denied")
    assert HostTotals.of_status(refused).down
    assert not HostTotals.of_status(HostStatus("n", HostState.CONNECTING)).down


def test_levels_and_cells_say_it_without_colour() -> None:
    assert [level(f) for f in (None, 0.0, 0.2, 0.5, 0.7, 0.99)] == [None, 0, 1, 2, 3, 4]
    letters = JobLetters()
    node0 = gpu_views(0)["node0"].sample
    assert node0 is not None
    busy = cell_of(node0.gpus[0], "util", letters, DEFAULT_THRESHOLDS)
    assert (busy.glyph, busy.marker, busy.job) == ("▓", "a", "resnet-ddp")  # 80%
    idle_under_job = cell_of(node0.gpus[3], "util", letters, DEFAULT_THRESHOLDS)
    assert idle_under_job.marker == "!" and idle_under_job.alerts == ("idle under a job",)
    unknown = cell_of(
        replace(node0.gpus[1], utilization_gpu=None, processes=()),
        "util",
        letters,
        DEFAULT_THRESHOLDS,
    )
    assert (unknown.glyph, unknown.marker) == ("?", " ")
    assert letters.letter("other") == "b" and letters.letter("resnet-ddp") == "a"


def test_sorts_and_groups() -> None:
    hosts = dense_inventory(20).hosts
    views = dense_views(hosts=20)
    assert [h.name for h in sort_hosts(hosts, views, "name")][:3] == [name(0), name(1), name(2)]
    by_temp = sort_hosts(hosts, views, "temp")
    assert by_temp[0].name == name(5)  # its GPU 3 is at 88 C
    groups = group_hosts(hosts, views, "tag")
    assert [(g, len(h)) for g, h in groups] == [("rack0", 20)]
    with pytest.raises(ValueError, match="sort: unknown 'speed'"):
        sort_hosts(hosts, views, "speed")


def test_shape_fits_256_hosts_on_200x45_and_narrows_when_it_must() -> None:
    wide = GridShape.fit(200, 45, 7, 8, 256)
    assert (wide.cell_width, wide.per_row, wide.block_width) == (3, 6, 33)
    narrow = GridShape.fit(200, 30, 7, 8, 256)
    assert narrow.cell_width == 2 and narrow.per_row == 8
    assert GridShape.fit(20, 10, 30, 8, 3).per_row == 1  # never zero blocks a line


def test_grid_lines_and_cursor_neighbours() -> None:
    hosts = dense_inventory(8).hosts
    grid = GridLines.build([("rack0", hosts[:5]), ("rack1", hosts[5:])], per_row=3)
    assert [heading for heading, _ in grid.lines] == [
        "rack0 (5 hosts)",
        None,
        None,
        "rack1 (3 hosts)",
        None,
    ]
    assert grid.neighbour(name(1), 0, 1) == name(4)
    assert grid.neighbour(name(4), 0, 1) == name(6)  # the next group's line, same column
    assert grid.neighbour(name(4), 1, 0) == name(5)
    assert grid.neighbour(name(7), 1, 0) == name(7)  # the last host stays
    assert grid.neighbour(None, 0, 1) == name(0)


def test_history_keeps_each_gpu_once_per_sample_and_packs_none() -> None:
    history = GpuHistory(samples=3)
    for step in range(5):
        views = gpu_views(step)
        history.add(views)
        history.add(views)  # the same sample again: nothing added
    util = history.series("node0", "util")
    assert [s.gpu for s in util] == [0, 1, 2, 3]
    assert util[0].seconds == (-2.0, -1.0, 0.0) and len(util[0].values) == 3
    assert history.series("node3", "util") == []  # only a stale sample: nothing
    temps = history.series("node1", "temp")
    assert temps[0].values[-1] == 91.0
    sample = views["node1"].sample
    assert sample is not None
    cold = replace(sample.gpus[0], temperature_c=None)
    gone = replace(sample, time=FROZEN_NOW + 10, gpus=(cold,))
    history.add({"node1": HostView("node1", HostState.UP, sample=gone)})
    assert history.series("node1", "temp")[0].values[-1] is None
    with pytest.raises(ValueError, match="figure: unknown 'fan'"):
        history.series("node1", "fan")


def test_history_keeps_gpus_that_come_and_go_aligned_with_their_times() -> None:
    history = GpuHistory(samples=4)
    sample = gpu_views(0)["node0"].sample
    assert sample is not None
    first, second = sample.gpus[0], replace(sample.gpus[1], index=5, temperature_c=70.0)

    def at(t: float, *gpus: GpuSample) -> dict[str, HostView]:
        return {"node0": HostView("node0", HostState.UP, sample=replace(sample, time=t, gpus=gpus))}

    history.add(at(1.0))  # no GPUs yet
    history.add(at(2.0, first))
    history.add(at(3.0, first, second))  # GPU 5 appears
    history.add(at(4.0, second))  # GPU 0 gone
    history.add(at(5.0, first, second))
    temps = {s.gpu: s for s in history.series("node0", "temp")}
    assert sorted(temps) == [0, 5]
    assert temps[0].seconds == temps[5].seconds == (-3.0, -2.0, -1.0, 0.0)
    assert temps[0].values == (first.temperature_c, first.temperature_c, None, first.temperature_c)
    assert temps[5].values == (None, 70.0, 70.0, 70.0)


async def test_the_palette_reaches_the_dense_toggle() -> None:
    app = DistConsoleApp(dense_inventory(20), connections_factory=None, clock=lambda: FROZEN_NOW)
    async with app.run_test(size=(120, 30)) as pilot:
        await run_palette(pilot, "Dense/detailed GPU view")
        assert app.current_mode == "gpus" and not app.cluster_screen.dense


async def run_palette(pilot: Pilot[Any], command: str) -> None:
    await pilot.press("colon")
    await pilot.pause()
    await pilot.press(*command)
    await pilot.pause()
    await pilot.press("enter")
    await pilot.pause()
    await pilot.pause()
