"""Ray planner: the head's process (Ray head + driver), one Ray node per other host, the
ports, temp dirs and log files; spec/CLI validation naming the field; export refuses.

The scripts themselves run in tests/integration/test_ray.py (real ray, real sshd); a
node's stop once its head is gone runs here too, with a stub ``ray``."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from console.commands.parts.job_options import add_job_options, spec_from_args
from console.errors import JobSpecError
from console.export import job_shape
from console.inventory import Host, Inventory
from console.jobs.models import JobKind, LogFile
from console.jobs.plan import ray as plan_ray
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec

JOB = "job-7"
JD = "~/distconsole/.distconsole/jobs/job-7"


def inventory(n: int = 2, **host: object) -> Inventory:
    return Inventory(
        path="hosts.yaml",
        hosts=tuple(
            Host(name=f"n{i}", address=f"10.0.0.{i + 1}", **host)  # type: ignore[arg-type]
            for i in range(n)
        ),
    )


def ray_spec(**fields: object) -> object:
    return make_spec(kind="ray", program="example:ray", master_port=4000, **fields)


def test_head_runs_ray_head_and_driver_others_run_a_node() -> None:
    spec = make_spec(
        kind="ray",
        program="driver.py",
        args=["--steps", "{total_steps}"],
        master_port=4000,
        total_steps=6,
        gpus_per_host=2,
        ray_object_store="100M",
        env={"U": "1"},
    )
    p = plan(spec, inventory(3), job_id=JOB)
    assert p.kind is JobKind.RAY and p.world_size == 3
    assert [(x.host, x.role, x.index) for x in p.launches] == [
        ("n0", "driver", 0),
        ("n1", "raynode", 1),
        ("n2", "raynode", 2),
    ]
    head, node = p.launches[0], p.launches[1]
    assert head.argv[:2] == ("bash", "-c") and head.argv[3] == plan_ray.HEAD_WRAPPER
    assert node.argv[3] == plan_ray.NODE_WRAPPER
    tmp0, tmp1 = plan_ray.temp_dir(JOB, "n0"), plan_ray.temp_dir(JOB, "n1")
    assert (
        "ray start --block --head --port 4000 --dashboard-host 127.0.0.1 --dashboard-port 4001"
        " --ray-client-server-port 4002 --node-ip-address 10.0.0.1"
        f" --temp-dir {tmp0} --dashboard-agent-listen-port 4003 --disable-usage-stats"
        " --num-gpus 2 --object-store-memory 100000000 "
    ) in head.argv[2]
    assert (
        "ray start --block --address 10.0.0.1:4000 --node-ip-address 10.0.0.2"
        f" --temp-dir {tmp1} --dashboard-agent-listen-port 4004 --disable-usage-stats"
        " --num-gpus 2 --object-store-memory 100000000 "
    ) in node.argv[2]
    # The driver: the host's python, the arguments substituted, after the node wait.
    script = head.argv[2]
    assert "python3 driver.py --steps 6 </dev/null &" in script
    assert script.index("ray.nodes()") < script.index("python3 driver.py")
    assert "/dev/tcp/10.0.0.1/4000" in node.argv[2]
    assert head.env["RAY_ADDRESS"] == node.env["RAY_ADDRESS"] == "10.0.0.1:4000"
    assert head.env["DISTCONSOLE_RAY_NODES"] == "3" and head.env["U"] == "1"
    assert head.env["RAY_USAGE_STATS_ENABLED"] == "0"
    assert "Ray dashboard: http://127.0.0.1:4001 (on n0)" in p.warnings


def test_log_files_driver_first_then_ray_start_then_raylet() -> None:
    p = plan(ray_spec(), inventory(), job_id=JOB)
    head, node = p.launches
    logs0 = f"{plan_ray.temp_dir(JOB, 'n0')}/session_latest/logs"
    assert head.log_paths == (
        LogFile(f"{JD}/driver-0.out", "stdout", "driver", index=0),
        LogFile(f"{JD}/driver-0.err", "stderr", "driver", index=0),
        LogFile(f"{JD}/raynode-0.out", "stdout", "raynode", index=0),
        LogFile(f"{JD}/raynode-0.err", "stderr", "raynode", index=0),
        LogFile(f"{logs0}/raylet.out", "stdout", "raylet", index=0),
        LogFile(f"{logs0}/raylet.err", "stderr", "raylet", index=0),
    )
    assert [f.path.rsplit("/", 1)[1] for f in node.log_paths] == [
        "raynode-1.out",
        "raynode-1.err",
        "raylet.out",
        "raylet.err",
    ]
    # The example goes to the head only: the driver is the one program it runs.
    examples = [(u.host, u.resource) for u in p.uploads if u.package == "console.examples"]
    assert examples == [("n0", "ray_train.py")]


def test_temp_dirs_are_short_and_unique_per_job_and_host() -> None:
    dirs = {plan_ray.temp_dir(j, h) for j in ("a" * 80, "b" * 80) for h in ("n0", "n1")}
    assert len(dirs) == 4
    # Ray's sockets live under it: <dir>/session_<date>_<time>_<us>_<pid>/sockets/raylet
    # must stay within 107 bytes.
    assert all(
        len(d) + len("/session_2026-11-24_22-15-50_732637_4194304/sockets/plasma_store") <= 107
        for d in dirs
    )


def test_no_gpus_flag_when_unknown_and_dashboard_on_all_interfaces() -> None:
    p = plan(
        ray_spec(ray_dashboard_host="0.0.0.0", ray_dashboard_port=8265),
        inventory(),
        job_id=JOB,
    )
    assert "--num-gpus" not in p.launches[0].argv[2]
    assert "--dashboard-host 0.0.0.0 --dashboard-port 8265" in p.launches[0].argv[2]
    assert "Ray dashboard: http://10.0.0.1:8265 (on n0)" in p.warnings
    assert "--num-gpus 4" in plan(ray_spec(), inventory(gpus=4), job_id=JOB).launches[0].argv[2]


def test_a_host_with_its_own_python_runs_its_own_ray() -> None:
    p = plan(ray_spec(), inventory(python="/opt/py/bin/python3"), job_id=JOB)
    assert "/opt/py/bin/python3 -m ray.scripts.scripts start --block" in p.launches[1].argv[2]


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"kind": "ddp", "ray_object_store": "1G"}, "ray_object_store", "only applies"),
        ({"kind": "ps", "ray_dashboard_port": 8265}, "ray_dashboard_port", "only applies"),
        ({"kind": "mpi", "ray_dashboard_host": "0.0.0.0"}, "ray_dashboard_host", "only applies"),
        ({"kind": "ray", "ray_object_store": "10M"}, "ray_object_store", "at least 79M"),
        ({"kind": "ray", "ray_object_store": "lots"}, "ray_object_store", "not a size"),
        ({"kind": "ray", "ray_dashboard_port": 80}, "ray_dashboard_port", "between 1024"),
        ({"kind": "ray", "ray_dashboard_host": "a b"}, "ray_dashboard_host", "not an address"),
    ],
)
def test_spec_problems_name_the_field(fields: dict, field: str, words: str) -> None:
    with pytest.raises(JobSpecError) as caught:
        make_spec(program="example:ray", **fields)
    assert caught.value.field == field and words in caught.value.detail


def test_dashboard_port_inside_the_jobs_ray_ports_is_refused() -> None:
    with pytest.raises(JobSpecError) as caught:
        plan(ray_spec(ray_dashboard_port=4003), inventory(), job_id=JOB)
    assert caught.value.field == "ray_dashboard_port" and "4000..4004" in caught.value.detail


def test_cli_options_reach_the_spec_and_errors_name_the_option() -> None:
    parser = argparse.ArgumentParser()
    add_job_options(parser)
    args = parser.parse_args(["--kind", "ray", "--ray-object-store", "2G"])
    args.command = ["example:ray"]
    assert spec_from_args(args).ray_object_store == 2_000_000_000
    bad = parser.parse_args(["--kind", "ddp", "--ray-dashboard-port", "8265"])
    bad.command = ["train.py"]
    with pytest.raises(JobSpecError) as caught:
        spec_from_args(bad)
    assert caught.value.field == "--ray-dashboard-port"


def test_export_refuses_a_ray_job_naming_kind() -> None:
    with pytest.raises(JobSpecError) as caught:
        job_shape(ray_spec(), inventory())  # type: ignore[arg-type]
    assert caught.value.field == "kind" and "not exported" in caught.value.detail


def test_the_scripts_are_valid_bash() -> None:
    p = plan(ray_spec(), inventory(), job_id=JOB)
    for launch in p.launches:
        subprocess.run(["bash", "-n", "-c", launch.argv[2]], check=True)


STUB_RAY = """#!/usr/bin/env python3
# `ray start --block` whose own shutdown never ends (as with its head gone: it drains
# through the GCS): TERM is noted and ignored. No child processes.
import os, signal, time
def note(what):
    with open(os.environ["RAY_STUB_LOG"], "a") as log:
        log.write(what + "\\n")
signal.signal(signal.SIGTERM, lambda *_: note("TERM"))
note("started")
while True:
    time.sleep(0.1)
"""


@contextlib.contextmanager
def node_with_stub_ray(tmp_path: Path) -> Iterator[tuple[socket.socket, subprocess.Popen[str]]]:
    """Node 1's script, running with a stub ``ray`` (its log: ``tmp_path/ray.log``), in a
    session of its own; its head's GCS port is the yielded listening socket (127.0.0.1),
    which the node has probed once. Whatever is left of the session goes afterwards."""
    stub = tmp_path / "bin" / "ray"
    stub.parent.mkdir()
    stub.write_text(STUB_RAY)
    stub.chmod(0o755)
    head = socket.socket()
    head.bind(("127.0.0.1", 0))
    head.listen()
    head.settimeout(30)
    hosts = Inventory(
        path="hosts.yaml",
        hosts=tuple(
            Host(name=f"n{i}", address="127.0.0.1", work_dir=str(tmp_path / f"w{i}"))
            for i in range(2)
        ),
    )
    spec = make_spec(kind="ray", program="driver.py", master_port=head.getsockname()[1])
    script = plan(spec, hosts, job_id=JOB).launches[1].argv[2]
    env = dict(
        os.environ,
        PATH=f"{stub.parent}:{os.environ['PATH']}",
        RAY_STUB_LOG=str(tmp_path / "ray.log"),
    )
    node = subprocess.Popen(
        ["bash", "-c", script, plan_ray.NODE_WRAPPER],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        head.accept()[0].close()  # the node saw its head once
        wait_for_line(tmp_path / "ray.log", "started", node)
        yield head, node
    finally:
        head.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGKILL)
        node.wait()
        shutil.rmtree(plan_ray.private_dir(JOB, "n1"), ignore_errors=True)


def test_a_node_whose_head_is_gone_kills_its_ray_at_once(tmp_path: Path) -> None:
    """The head's port answers once, then is closed: the node stops without asking
    ``ray start`` to shut down (TERM would only start a drain through the gone GCS,
    waited out to SHUTDOWN_WAIT_S) and leaves nothing of its session."""
    with node_with_stub_ray(tmp_path) as (head, node):
        port = head.getsockname()[1]
        head.close()
        _, err = node.communicate(timeout=60)
        assert node.returncode == 0, err
        assert f"the Ray head at 127.0.0.1:{port} is gone; stopping this node" in err
        assert (tmp_path / "ray.log").read_text().splitlines() == ["started"]  # never TERMed
        assert [p.pid for p in psutil.process_iter() if _in_session(p.pid, node.pid)] == []


def test_a_stopped_node_waits_on_ray_start_only_while_its_head_answers(tmp_path: Path) -> None:
    """A stop TERMs the node: its ``ray start`` is asked to shut down (TERM), and the node
    waits for that while the head's GCS port answers (it probes it meanwhile); once the
    head is gone (as a stop TERMs the head too), it kills what is left at once."""
    with node_with_stub_ray(tmp_path) as (head, node):
        node.send_signal(signal.SIGTERM)
        log = tmp_path / "ray.log"
        wait_for_line(log, "TERM", node)
        # The stop asks whether the head still answers, again and again (two answers: one
        # connection may be the watch loop's, made before the TERM).
        for _ in range(2):
            head.accept()[0].close()
        head.close()
        _, err = node.communicate(timeout=60)
        assert node.returncode == 143, err
        assert log.read_text().splitlines() == ["started", "TERM"]
        assert [p.pid for p in psutil.process_iter() if _in_session(p.pid, node.pid)] == []


def wait_for_line(path: Path, line: str, node: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while not path.exists() or line not in path.read_text().splitlines():
        assert node.poll() is None and time.monotonic() < deadline, f"no {line!r} in {path}"
        time.sleep(0.02)


def _in_session(pid: int, sid: int) -> bool:
    try:
        return os.getsid(pid) == sid
    except (ProcessLookupError, PermissionError):
        return False
