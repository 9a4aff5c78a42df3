"""What bench/cluster_ui.py prints: its first-frame and steady-state tables, from the
results of each N's runs (one dict per run, as a worker printed it)."""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from typing import Any

from common import fmt, print_header


def _med(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _mx(values: Sequence[float]) -> float | None:
    return max(values) if values else None


def _floor(console_cpu: float | None, hosts_cpu: float | None) -> float | None:
    """The least wall time that CPU work takes here: all of it over every core, and the
    console's own part (one event loop) on one."""
    if console_cpu is None or hosts_cpu is None:
        return None
    return max(console_cpu, (console_cpu + hosts_cpu) / (os.cpu_count() or 1))


def print_tables(results: dict[int, list[dict[str, Any]]]) -> None:
    def med(runs: list[dict[str, Any]], key: str) -> float | None:
        values = [r[key] for r in runs if r.get(key) is not None]
        return statistics.median(values) if values else None

    print("\nfirst frame: seconds from creating the app (same clock for every column)")
    header = (
        f"{'hosts':>5}  {'app up':>6}  {'1st host up':>11}  {'all up':>6}  "
        f"{'1st sample':>10}  {'all sampled':>11}  {'first frame':>11}  "
        f"{'CPU s: console':>14}  {'hosts':>5}  {'floor':>5}"
    )
    print_header(header)
    for count, runs in results.items():
        cells = [
            fmt(med(runs, k), ".2f")
            for k in (
                "app_s", "first_up_s", "connected_s", "first_data_s", "data_s", "first_frame_s",
                "first_console_cpu_s", "first_hosts_cpu_s",
            )
        ]  # fmt: skip
        floor = _floor(med(runs, "first_console_cpu_s"), med(runs, "first_hosts_cpu_s"))
        print(
            f"{count:>5}  {cells[0]:>6}  {cells[1]:>11}  {cells[2]:>6}  {cells[3]:>10}  "
            f"{cells[4]:>11}  {cells[5]:>11}  {cells[6]:>14}  {cells[7]:>5}  "
            f"{fmt(floor, '.2f'):>5}"
        )
    print(
        "CPU s: CPU seconds used until the first frame by the console process and by the "
        "demo hosts (their SSH servers and samplers share this machine's cores); floor: the "
        f"first frame this machine cannot beat, that CPU spread over its {os.cpu_count()} "
        "cores (on a real cluster each host's share runs on its own cores)"
    )

    for count, runs in results.items():
        print(
            f"{count} hosts: the first jobs sweep of every host ended at "
            f"{fmt(med(runs, 'sweep_s'), '.2f')} s; the console used "
            f"{fmt(med(runs, 'sweep_cpu_s'), '.2f')} CPU s from the first frame to then "
            "(the next sweep comes 120 s later)"
        )
    print("\nsteady state (after the first jobs sweep + 3 s) and keys (sent while samples flow)")
    header = (
        f"{'hosts':>5}  {'console CPU':>11}  {'apply ms med':>12}  {'paint ms med/max':>16}  "
        f"{'peak RSS':>8}  {'key a med/max':>13}  {'typing med/max':>14}  {'hosts CPU':>9}"
    )
    print_header(header)
    for count, runs in results.items():
        paint = [p for r in runs for p in r["paint_ms"]]
        apply = [a for r in runs for a in r["apply_ms"]]
        keys = [x for r in runs for x in r["attention_ms"]]
        typing = [x for r in runs for x in r["typing_ms"]]
        print(
            f"{count:>5}  {fmt(med(runs, 'cpu_percent'), '.1f'):>9} %  "
            f"{fmt(_med(apply), '.2f'):>12}  "
            f"{fmt(_med(paint), '.1f'):>7}/{fmt(_mx(paint), '.0f'):<5} ms  "
            f"{fmt(med(runs, 'peak_rss_mib'), '.0f'):>4} MiB  "
            f"{fmt(_med(keys), '.0f'):>5}/{fmt(_mx(keys), '.0f'):<4} ms  "
            f"{fmt(_med(typing), '.0f'):>6}/{fmt(_mx(typing), '.0f'):<4} ms  "
            f"{fmt(med(runs, 'hosts_cpu_percent'), '.0f'):>7} %"
        )
    print(
        "apply: handing one batch of host views to the screen; paint: one screen update "
        "(layout if any, render, terminal bytes); hosts CPU: the demo server process and "
        "its samplers (the hosts' side, not the console's)"
    )
    print("targets: 64 hosts first frame <= 1 s; console <= 5 % of one core")
