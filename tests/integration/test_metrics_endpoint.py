"""`distconsole metrics` on the demo cluster with a DDP example training, scraped by
prometheus_client's parser and by a real Prometheus server (Debian's `prometheus`).

Real parts only: `distconsole demo --serve` (in-process SSH servers on 127.42.0.x
running real bash; its GPUs are simulated, labelled so, and their processes are the
job's real ones), `distconsole launch --detach` and `distconsole metrics` as
subprocesses, and the prometheus binary.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_demo import REPO, Served, _end, _start_serve

T = TypeVar("T")
needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="Prometheus not installed (apt: prometheus)"
)


@pytest.fixture(scope="module")
def demo2() -> Iterator[Served]:
    server = _start_serve("--hosts", "2")
    yield server
    _end(server.proc)


def wait_for(probe: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout}s: {what}")


def start(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """A distconsole command that prints one line first (its URL)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "console", *argv],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline().strip() if ready else ""
    if not line:
        _end(proc)
        raise AssertionError(f"{argv[0]} printed nothing: {proc.stderr and proc.stderr.read()}")
    return proc, line


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        out[family.name] = [(s.labels, s.value) for s in family.samples]
    return out


def prometheus_query(base: str, query: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            body = json.load(answer)
    except OSError:
        return []
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


@pytest.mark.slow
@needs_prometheus
def test_metrics_endpoint_on_the_demo_with_ddp_training_scraped_by_prometheus(
    demo2: Served, tmp_path: Path
) -> None:
    env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(tmp_path / "data"))
    inventory = str(demo2.inventory_path)
    launch = subprocess.run(
        [sys.executable, "-m", "console", "launch", inventory, "--kind", "ddp",
         "--gpus-per-host", "1", "--name", "metrics-ddp", "--detach",
         "--", "example:ddp", "--steps", "3000", "--sleep", "0.1"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert launch.returncode == 0, launch.stderr[-3000:]
    job_id = launch.stdout.strip().splitlines()[-1].split()[-1]
    metrics, line = start(
        ["metrics", inventory, "--listen", "127.0.0.1:0", "--interval", "0.5",
         "--jobs-every", "2"],
        env,
    )  # fmt: skip
    prometheus: subprocess.Popen[str] | None = None
    try:
        url = re.search(r"http://\S+", line)
        assert url, line
        endpoint = url.group(0)

        def job_gpus() -> dict[str, list[tuple[dict[str, str], float]]] | None:
            parsed = scrape(endpoint)
            util = parsed.get("DCGM_FI_DEV_GPU_UTIL", [])
            held = [lab for lab, _v in util if lab.get("job") == job_id]
            steps = [lab for lab, _v in parsed.get("distconsole_rank_step", [])]
            return parsed if len(held) == 2 and len(steps) == 2 else None

        parsed = wait_for(job_gpus, 120, "both ranks' GPUs labelled with the job, and steps")
        util = parsed["DCGM_FI_DEV_GPU_UTIL"]
        hosts = {h.name for h in demo2.inventory.hosts}
        assert {lab["Hostname"] for lab, _v in util} == hosts
        gpus_per_host = {h.name: h.gpus for h in demo2.inventory.hosts}
        for name in hosts:
            shown = sorted(int(lab["gpu"]) for lab, _v in util if lab["Hostname"] == name)
            assert shown == list(range(len(shown))) and len(shown) >= 1, (name, shown)
            assert gpus_per_host[name] in (None, len(shown))
        for lab, _v in util:
            assert set(lab) >= {"gpu", "UUID", "device", "modelName", "Hostname"}
        held = sorted((lab["Hostname"], lab["rank"]) for lab, _v in util if lab.get("job"))
        assert held == [("node0", "0"), ("node1", "1")]
        assert {lab["Hostname"]: v for lab, v in parsed["distconsole_host_up"]} == dict.fromkeys(
            hosts, 1.0
        )
        states = [lab for lab, _v in parsed["distconsole_job_state"] if lab["job"] == job_id]
        assert states and states[0]["state"] == "running" and states[0]["kind"] == "ddp"
        losses = {
            lab["rank"] for lab, _v in parsed["distconsole_rank_loss"] if lab["job"] == job_id
        }
        assert losses == {"0", "1"}

        # A real Prometheus scrapes it: the target is up and a query returns the series.
        address = endpoint.removeprefix("http://").removesuffix("/metrics")
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: distconsole\n"
            f"    static_configs:\n      - targets: ['{address}']\n"
        )
        web = f"127.0.0.1:{free_port()}"
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address={web}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        base = f"http://{web}"
        up = wait_for(
            lambda: [r for r in prometheus_query(base, 'up{job="distconsole"}')
                     if r["value"][1] == "1"],
            60, "Prometheus scrapes the endpoint (up == 1)",
        )  # fmt: skip
        assert up[0]["metric"]["instance"] == address
        # Prometheus keeps its own job label (the scrape job's) and renames the
        # endpoint's to exported_job (honor_labels: true keeps ours instead).
        series = wait_for(
            lambda: prometheus_query(base, f'DCGM_FI_DEV_GPU_UTIL{{exported_job="{job_id}"}}'),
            30, "the job's GPU utilization series",
        )  # fmt: skip
        assert sorted(s["metric"]["Hostname"] for s in series) == ["node0", "node1"]
        everything = prometheus_query(base, "count(DCGM_FI_DEV_GPU_UTIL)")
        assert int(everything[0]["value"][1]) == len(util)
    finally:
        if prometheus is not None:
            prometheus.send_signal(signal.SIGTERM)
            try:
                prometheus.wait(timeout=15)
            except subprocess.TimeoutExpired:
                prometheus.kill()
        _end(metrics)
        subprocess.run(
            [sys.executable, "-m", "console", "stop", inventory, job_id],
            cwd=REPO, env=env, capture_output=True, timeout=120,
        )  # fmt: skip


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
