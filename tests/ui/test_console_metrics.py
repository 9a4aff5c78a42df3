"""The console's own endpoint (`distconsole HOSTS --metrics-listen ADDR:PORT`): the app,
on the in-process demo cluster (real SSH servers on 127.42.0.x, simulated GPUs, real
samplers), serves the views its screens get to a scrape (prometheus_client's parser);
the endpoint closes with the console."""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from textual.pilot import Pilot

from console import inventory as inventory_module
from console.settings import make_settings
from console.transport.demo import DemoCluster
from console.ui.app import DistConsoleApp


async def until(pilot: Pilot[Any], check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        await pilot.pause(0.3)
    raise AssertionError(f"not within {timeout}s: {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(url: str) -> dict[str, list[dict[str, str]]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    return {
        f.name: [s.labels | {"value": str(s.value)} for s in f.samples]
        for f in text_string_to_metric_families(text)
    }


async def test_console_serves_its_views_to_a_scrape() -> None:
    async with DemoCluster(2) as cluster:
        inventory = inventory_module.load(cluster.inventory_path)
        app = DistConsoleApp(inventory, settings=make_settings(monitor_interval_s=0.5))
        port = free_port()
        app.services.metrics_listen = ("127.0.0.1", port)
        url = f"http://127.0.0.1:{port}/metrics"
        seen: dict[str, list[dict[str, str]]] = {}
        async with app.run_test(size=(120, 40)) as pilot:

            def both_hosts() -> bool:
                nonlocal seen
                seen = scrape(url)
                hosts = {s["Hostname"] for s in seen.get("DCGM_FI_DEV_GPU_UTIL", [])}
                return hosts == {"node0", "node1"}

            deadline = time.monotonic() + 60
            while not await asyncio.to_thread(both_hosts):
                assert time.monotonic() < deadline, f"no GPU series of both hosts: {seen}"
                await pilot.pause(0.5)
            up = {s["Hostname"]: s["value"] for s in seen["distconsole_host_up"]}
            assert up == {"node0": "1.0", "node1": "1.0"}
            # Every host has a health series, 0 (ok) while nothing is found (issue 30).
            health = {s["Hostname"]: s["value"] for s in seen["distconsole_host_health"]}
            assert health == {"node0": "0.0", "node1": "0.0"}
            assert app.feeds.metrics is not None and app.feeds.metrics.url == url
        assert await asyncio.to_thread(scrape, url) == {}  # closed with the console
