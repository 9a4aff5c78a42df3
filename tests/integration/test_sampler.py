"""The streaming sampler end to end over real OpenSSH sshd hosts (and demo hosts).

This machine has no NVIDIA GPU: ``tests/standin/nvidia-smi`` is a GPU STAND-IN that
answers nvidia-smi's query flags from the real H200 capture in tests/data/nvidia-smi.
It is put first on the host's PATH through the inventory's ``setup:`` line. pynvml is
installed but finds no driver, so each sampler also proves the NVML -> nvidia-smi
fallback.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from gpu_standin import readable_standin_dir
from sshd_cluster import SETUP_LINE, SshdCluster

from console.inventory import load
from console.probe.models import HostView
from console.probe.monitor import ClusterMonitor
from console.transport.base import HostState
from console.transport.pool import ClusterConnections
from console.transport.ship import STDIN_SOURCE

pytestmark = pytest.mark.sshd

STANDIN_DIR = readable_standin_dir()
STANDIN_SETUP = f"{SETUP_LINE} && export PATH={STANDIN_DIR}:$PATH"
H200_PIDS = [10291, 10293, 10309]


async def _until(
    monitor: ClusterMonitor, check: Callable[[dict[str, HostView]], bool], timeout: float
) -> dict[str, HostView]:
    deadline = time.monotonic() + timeout
    async for _ in monitor.updates():
        views = monitor.views()
        if check(views):
            return views
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"condition not met within {timeout}s: {monitor.views()}")


def _sampled_after(view: HostView, when: float) -> bool:
    return view.sample is not None and view.sample.time > when


def _samplers_of(user: str) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter(["username", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if proc.info["username"] == user and STDIN_SOURCE in cmd and "auto" in cmd:
            out.append(proc)
    return out


async def test_sampler_streams_standin_gpu_over_ssh(
    sshd_cluster: Callable[..., SshdCluster],
) -> None:
    cluster = sshd_cluster(n=2)
    inventory = load(cluster.write_inventory(setup=STANDIN_SETUP))
    async with (
        ClusterConnections(inventory) as pool,
        ClusterMonitor(pool, interval=0.5) as monitor,
    ):
        views = await monitor.first_frame(timeout=30)
        for view in views.values():
            assert view.state is HostState.UP, view
            sample = view.sample
            assert sample is not None and not view.stale
            assert sample.gpu_source == "nvidia-smi"  # NVML found no driver: fell back
            assert sample.simulated is False
            assert sample.host_source == "proc"  # psutil is installed: /proc is cheaper
            assert sample.memory_total_mib and sample.memory_total_mib > 0
            assert sample.cpu_percent is not None
            (gpu,) = sample.gpus
            assert gpu.name == "NVIDIA H200"
            assert (gpu.utilization_gpu, gpu.memory_used_mib, gpu.memory_total_mib) == (
                100.0,
                32362.0,
                143771.0,
            )
            assert (gpu.power_draw_w, gpu.power_limit_w, gpu.temperature_c) == (627.4, 700, 52)
            assert gpu.fan_percent is None
            assert [p.pid for p in gpu.processes] == H200_PIDS
            assert gpu.processes[2].command == "./gpu_burn"
            assert gpu.processes[2].used_memory_mib == 28234.0
        first_times = {n: v.sample.time for n, v in views.items() if v.sample}

        # It streams: new samples keep coming from ONE long-lived sampler per host.
        await _until(
            monitor,
            lambda vs: all(
                v.sample is not None and v.sample.time > first_times[n] + 1.0 for n, v in vs.items()
            ),
            timeout=15,
        )
        for host in cluster.hosts:
            assert len(_samplers_of(host.user)) == 1


async def test_setup_line_ending_in_a_comment_still_gets_its_gpu_panel(
    sshd_cluster: Callable[..., SshdCluster],
) -> None:
    # The defect: `{setup} && exec sampler` made the comment swallow the sampler.
    cluster = sshd_cluster(n=1)
    setup = f"{STANDIN_SETUP}  # py3.11 venv, GPU stand-in first on PATH"
    inventory = load(cluster.write_inventory(setup=setup))
    async with (
        ClusterConnections(inventory) as pool,
        ClusterMonitor(pool, interval=0.5) as monitor,
    ):
        views = await monitor.first_frame(timeout=30)
        (view,) = views.values()
        assert view.state is HostState.UP, view
        assert view.sample is not None, view
        assert view.sample.gpu_source == "nvidia-smi"
        (gpu,) = view.sample.gpus
        assert (gpu.name, gpu.utilization_gpu) == ("NVIDIA H200", 100.0)
        first = view.sample.time
        # Still streaming from the one sampler: the comment did not end it either.
        await _until(monitor, lambda vs: all(_sampled_after(v, first) for v in vs.values()), 15)


async def test_host_down_mid_stream_goes_stale_others_continue_then_comes_back(
    sshd_cluster: Callable[..., SshdCluster],
) -> None:
    cluster = sshd_cluster(n=2)
    inventory = load(cluster.write_inventory(setup=STANDIN_SETUP))
    up, gone = cluster.hosts[0].name, cluster.hosts[1].name
    async with (
        ClusterConnections(inventory) as pool,
        ClusterMonitor(pool, interval=0.5) as monitor,
    ):
        views = await monitor.first_frame(timeout=30)
        assert all(v.sample is not None for v in views.values())

        cluster.stop(gone)
        stopped_at = time.time()
        down = await _until(monitor, lambda vs: vs[gone].state is not HostState.UP, timeout=20)
        lost = down[gone]
        assert lost.stale and lost.sample is not None  # last sample kept, marked stale
        assert lost.last_seen is not None and lost.last_seen <= stopped_at + 0.5
        assert lost.reason

        # The other host keeps updating while one is down.
        mark = time.time()
        during = await _until(
            monitor,
            lambda vs: _sampled_after(vs[up], mark + 1.0),
            timeout=15,
        )
        assert during[up].state is HostState.UP and not during[up].stale
        assert during[gone].state is not HostState.UP and during[gone].stale

        cluster.start(gone)
        restarted = time.time()
        pool.reconnect_now(gone)
        back = await _until(
            monitor,
            lambda vs: (
                vs[gone].state is HostState.UP
                and not vs[gone].stale
                and _sampled_after(vs[gone], restarted)
            ),
            timeout=40,
        )
        again = back[gone].sample
        assert again is not None and again.gpus[0].name == "NVIDIA H200"
        # The sampler restarted by itself on the new connection (the old one died with sshd).
        assert len(_samplers_of(cluster.host(gone).user)) == 1


async def test_gpu_processes_are_tied_to_job_and_rank(
    sshd_cluster: Callable[..., SshdCluster],
) -> None:
    cluster = sshd_cluster(n=1)
    host = cluster.hosts[0]
    pids_file = host.home / "standin-gpu-pids"
    env = {
        "PATH": "/usr/bin:/bin",
        "DISTCONSOLE_JOB_ID": "job-42",
        "RANK": "3",
        "LOCAL_RANK": "1",
    }
    # A rank process carrying the job's variables, and a grandchild whose launcher
    # cleared them: it is attributed through its ancestor.
    # As the host's user entirely (uid and gids), like a process its ssh session started.
    user, group, groups = host.user, host.user, list[str]()
    rank = subprocess.Popen(
        ["sleep", "120"], env=env, cwd="/", user=user, group=group, extra_groups=groups
    )
    wrapper = subprocess.Popen(
        ["bash", "-c", "env -u DISTCONSOLE_JOB_ID -u RANK -u LOCAL_RANK sleep 120 & echo $!; wait"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
        user=user,
        group=group,
        extra_groups=groups,
    )
    try:
        assert wrapper.stdout is not None
        stripped = int(wrapper.stdout.readline())
        pids_file.write_text(f"{rank.pid}\n{stripped}\n")
        os.chmod(pids_file, 0o644)
        setup = f"{STANDIN_SETUP} && export NVSMI_STANDIN_PIDS_FILE={pids_file}"
        inventory = load(cluster.write_inventory(setup=setup))
        async with (
            ClusterConnections(inventory) as pool,
            ClusterMonitor(pool, interval=0.5) as monitor,
        ):
            views = await monitor.first_frame(timeout=30)
            sample = views[host.name].sample
            assert sample is not None
            procs = {p.pid: p for p in sample.gpus[0].processes}
            assert set(procs) == {rank.pid, stripped, 10309}
            own = procs[rank.pid]
            assert (own.job, own.rank, own.local_rank) == ("job-42", 3, 1)
            assert own.user == host.user
            assert own.command == "sleep 120"
            inherited = procs[stripped]
            assert (inherited.job, inherited.rank, inherited.local_rank) == ("job-42", 3, 1)
            other = procs[10309]  # the captured process that is not running here
            assert (other.job, other.rank, other.user) == (None, None, None)
            assert other.command == "./gpu_burn"
    finally:
        for proc in (rank, wrapper):
            proc.kill()
            proc.wait()
        subprocess.run(["pkill", "-KILL", "-u", host.user, "sleep"], check=False)


async def test_host_without_python_falls_back_to_nvidia_smi_loop(
    sshd_cluster: Callable[..., SshdCluster],
) -> None:
    cluster = sshd_cluster(n=1)
    inventory = load(
        cluster.write_inventory(setup=STANDIN_SETUP, python="python3-not-installed-here")
    )
    async with (
        ClusterConnections(inventory) as pool,
        ClusterMonitor(pool, interval=0.5) as monitor,
    ):
        await monitor.first_frame(timeout=30)
        views = await _until(
            monitor,
            lambda vs: all(v.sample is not None for v in vs.values()),
            timeout=20,
        )
        sample = views[cluster.hosts[0].name].sample
        assert sample is not None
        assert sample.gpu_source == "nvidia-smi-loop"
        (gpu,) = sample.gpus
        assert (gpu.name, gpu.utilization_gpu, gpu.memory_used_mib) == ("NVIDIA H200", 100, 32362)
        assert sample.cpu_percent is None  # no python: no host figures, not zeros


async def test_once_one_sample_with_host_figures_and_no_sampler_left(
    sshd_cluster: Callable[..., SshdCluster],
) -> None:
    """``distconsole gpus``'s monitor: each host's sampler writes ONE sample (CPU %
    included, no second line waited for) and exits; nothing restarts it."""
    cluster = sshd_cluster(n=2)
    inventory = load(cluster.write_inventory(setup=STANDIN_SETUP))
    async with (
        ClusterConnections(inventory) as pool,
        ClusterMonitor(pool, interval=0.5, once=True) as monitor,
    ):
        views = await monitor.first_frame(timeout=30)
        for host in cluster.hosts:
            view = views[host.name]
            assert view.state is HostState.UP and not view.stale, view
            sample = view.sample
            assert sample is not None and sample.gpu_source == "nvidia-smi"
            assert sample.cpu_percent is not None and sample.memory_total_mib
            (gpu,) = sample.gpus
            assert [p.pid for p in gpu.processes] == H200_PIDS
        # The one-shot samplers end by themselves (a stream would run until closed).
        deadline = time.monotonic() + 15
        while any(_samplers_of(h.user) for h in cluster.hosts) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not any(_samplers_of(h.user) for h in cluster.hosts)
        await asyncio.sleep(1.5)  # a streaming monitor would have restarted by now
        assert not any(_samplers_of(h.user) for h in cluster.hosts)
        assert monitor.views() == views  # kept as taken: not marked stale or restarted


async def test_once_without_python_reads_one_nvidia_smi_query(
    sshd_cluster: Callable[..., SshdCluster],
) -> None:
    cluster = sshd_cluster(n=1)
    inventory = load(
        cluster.write_inventory(setup=STANDIN_SETUP, python="python3-not-installed-here")
    )
    async with (
        ClusterConnections(inventory) as pool,
        ClusterMonitor(pool, interval=0.5, once=True) as monitor,
    ):
        views = await monitor.first_frame(timeout=30)
        sample = views[cluster.hosts[0].name].sample
        assert sample is not None and sample.gpu_source == "nvidia-smi-loop"
        (gpu,) = sample.gpus
        assert (gpu.name, gpu.utilization_gpu, gpu.memory_used_mib) == ("NVIDIA H200", 100, 32362)


async def test_host_without_gpu_says_so(sshd_cluster: Callable[..., SshdCluster]) -> None:
    cluster = sshd_cluster(n=1)
    inventory = load(cluster.write_inventory())  # no stand-in on PATH, no driver
    async with (
        ClusterConnections(inventory) as pool,
        ClusterMonitor(pool, interval=0.5) as monitor,
    ):
        views = await monitor.first_frame(timeout=30)
        view = views[cluster.hosts[0].name]
        assert view.state is HostState.UP and view.sample is not None
        assert view.sample.gpus == ()
        assert view.sample.gpu_source == "none"
        assert view.sample.gpu_error is not None
        assert view.sample.gpu_error.startswith("no NVIDIA GPU")
        assert "NVML" in view.sample.gpu_error  # pynvml imported, NVML init failed cleanly
        assert view.sample.memory_used_mib is not None


def _gpus_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "console", "gpus", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_gpus_json_subprocess(sshd_cluster: Callable[..., SshdCluster]) -> None:
    cluster = sshd_cluster(n=2)
    inventory = cluster.write_inventory(setup=STANDIN_SETUP)
    done = _gpus_cli(str(inventory), "--json", "--interval", "0.5")
    assert done.returncode == 0, done.stderr
    hosts = json.loads(done.stdout)
    assert [h["name"] for h in hosts] == [h.name for h in cluster.hosts]
    for host in hosts:
        assert host["state"] == "up" and host["reason"] == ""
        assert host["simulated"] is False
        assert host["memory_total_mib"] > 0 and host["cpu_percent"] is not None
        (gpu,) = host["gpus"]
        for key in ("index", "uuid", "name", "memory_total_mib", "temperature_c"):
            assert gpu[key] is not None
        assert gpu["utilization_gpu"] == 100.0
        assert gpu["power_draw_w"] == 627.4 and gpu["power_limit_w"] == 700.0
        assert gpu["fan_percent"] is None  # "[N/A]" -> null, not 0
        assert [p["pid"] for p in gpu["processes"]] == H200_PIDS
        assert set(gpu["processes"][0]) >= {"pid", "user", "command", "used_memory_mib", "job"}

    cluster.stop(cluster.hosts[1].name)
    done = _gpus_cli(str(inventory), "--json")
    assert done.returncode == 1
    down = json.loads(done.stdout)[1]
    assert down["state"] == "down" and down["reason"]
    assert down["gpus"] == [] and down["cpu_percent"] is None

    table = _gpus_cli(str(inventory), "--host", cluster.hosts[0].name)
    assert table.returncode == 0, table.stderr
    assert "NVIDIA H200" in table.stdout and "1/1 hosts up and sampled" in table.stdout


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "nan"])
def test_gpus_rejects_bad_interval(tmp_path: Path, bad: str) -> None:
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text("hosts:\n  - name: a\n    address: 127.0.0.1\n")
    done = _gpus_cli(str(inventory), "--interval", bad)
    assert done.returncode == 2
    assert "--interval" in done.stderr


def test_gpus_bad_inventory_exits_2(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text("hosts:\n  - name: a\n    port: nope\n")
    done = _gpus_cli(str(inventory), "--json")
    assert done.returncode == 2
    assert str(inventory) in done.stderr


async def test_demo_hosts_simulate_gpus_busy_with_real_job_processes() -> None:
    from console.transport.demo import DemoCluster

    async with DemoCluster(hosts=2) as demo:
        inventory = load(demo.inventory_path)
        assert all(h.gpu_source == "simulated" for h in inventory.hosts)
        async with (
            ClusterConnections(inventory) as pool,
            ClusterMonitor(pool, interval=0.5) as monitor,
        ):
            await pool.wait_settled()
            started = await pool["node0"].run(
                "DISTCONSOLE_JOB_ID=demo-job RANK=6 LOCAL_RANK=2 "
                "setsid sleep 60 </dev/null >/dev/null 2>&1 & echo $!"
            )
            pid = int(started.stdout.strip())
            try:
                views = await _until(
                    monitor,
                    lambda vs: (
                        vs["node0"].sample is not None
                        and vs["node1"].sample is not None  # its first, under load, later
                        and any(g.processes for g in vs["node0"].sample.gpus)
                    ),
                    timeout=20,
                )
                node0, node1 = views["node0"].sample, views["node1"].sample
                assert node0 is not None and node1 is not None
                assert node0.simulated and node0.gpu_source == "simulated"
                assert len(node0.gpus) == 4
                assert all("(simulated)" in (g.name or "") for g in node0.gpus)
                busy = node0.gpus[2]  # LOCAL_RANK 2 % 4 GPUs
                (proc,) = busy.processes
                assert (proc.pid, proc.job, proc.rank, proc.local_rank) == (pid, "demo-job", 6, 2)
                assert busy.utilization_gpu is not None and busy.utilization_gpu > 50
                assert all(not g.processes for i, g in enumerate(node0.gpus) if i != 2)
                idle = node0.gpus[0].utilization_gpu
                assert idle is not None and idle < 10
                # The job runs on node0 only: node1's simulated GPUs stay empty.
                assert all(not g.processes for g in node1.gpus)
            finally:
                await pool["node0"].run(f"kill {pid}")
            await asyncio.sleep(0)
