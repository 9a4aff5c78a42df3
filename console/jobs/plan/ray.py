"""Ray mode: a Ray cluster made of the job's own SSH processes, and the driver on its head.

The first host's process (role ``driver``) starts ``ray start --head --block``, waits
until every host's node has joined, runs the driver program with ``RAY_ADDRESS`` set,
and then stops its Ray node: its exit status is the driver's, so the job's state is
the driver's. Every other host's process (role ``raynode``) runs ``ray start --address
HEAD:PORT --block`` and watches the head's GCS port: once the head is gone (the driver
ended) it stops its node and exits 0; a node that dies on its own exits with Ray's
status, which fails the job (fail-fast stops the rest). A node whose head is gone does
not ask ``ray start`` to shut down (it would wait on the GCS, below): it kills its
session's processes at once.

Stopping a node: TERM to ``ray start --block`` alone is Ray's own clean shutdown (it
stops its raylet, GCS, dashboard and agents; ~3 s on the head). A TERM to all of them
at once (what a stop sends to the job's process groups), or a head already gone, leaves
``ray start`` waiting on the GCS and the agents orphaned (seen with Ray 2.60): a node
waits on its ``ray start`` only while the head's GCS port answers. Ray's
workers lead process groups of their own, and Ray retitles its processes
(setproctitle), which blanks their /proc environ, so neither the job's process group
nor the ``DISTCONSOLE_JOB_ID`` marker finds them all; they do stay in the job process's
session (jobctl starts it with setsid). So after Ray's own shutdown (at most
``SHUTDOWN_WAIT_S``) the script SIGKILLs every other process of its session.

Ports, from the job's master port P: the GCS ``P``, the dashboard ``P+1`` (or the
spec's), Ray client server ``P+2``, node k's dashboard agent ``P+3+k`` (Ray's fixed
default 52365 collides between nodes or jobs sharing a machine); the rest are Ray's
random free ports. ``--temp-dir`` is a per-(job, host) directory under /tmp: Ray puts
Unix sockets under it, and a socket path may not exceed 107 bytes, which a temp dir in
the job directory (under a home) easily does; the job directory gets a ``ray-tmp``
link to it. Each node's ``raylet.out``/``raylet.err`` there are log files of the plan.
"""

from __future__ import annotations

import hashlib
import re
import shlex

from console.errors import JobSpecError
from console.jobs import paths
from console.jobs.models import JobKind, JobPlan, LogFile, RankLaunch
from console.jobs.plan.placement import (
    DEFAULT_PYTHON,
    PlacedHost,
    Placement,
    check_port_range,
    distconsole_env,
    example_uploads,
    job_env,
    program_argv,
    step_split,
    substitute,
)
from console.jobs.plan.ray_shell import FUNCTIONS, WAIT_NODES
from console.transport.ship import shell_join, shell_word

DRIVER_ROLE = "driver"  # the head host's process: Ray head + driver
NODE_ROLE = "raynode"  # every other host's process: one Ray node
RAYLET_ROLE = "raylet"  # Ray's own log files of a node
HEAD_WRAPPER = "distconsole-ray-head"  # $0 of the scripts: what `ps` shows
NODE_WRAPPER = "distconsole-ray-node"
DEFAULT_DASHBOARD_HOST = "127.0.0.1"  # the dashboard runs code on request: local only
NODES_WAIT_S = 300  # the driver starts once every node joined, or fails after this
SHUTDOWN_WAIT_S = 5  # ray start's own shutdown, before what is left is killed
HEAD_GONE_CHECKS = 3  # refused connections in a row to the GCS port: the head is gone
TEMP_ROOT = "/tmp"
TEMP_LINK = "ray-tmp"  # in the job directory: the node's --temp-dir


def temp_dir(job_id: str, host: str) -> str:
    """Ray's ``--temp-dir`` for ``host`` in ``job_id``: short (socket paths), unique per
    job and host (two users, or two hosts of one job, on one machine never share it)."""
    return f"{private_dir(job_id, host)}/t"


def private_dir(job_id: str, host: str) -> str:
    """The temp dir's parent, 0700 and this user's: Ray makes its temp dir 0777."""
    digest = hashlib.sha256(f"{job_id}\0{host}".encode()).hexdigest()[:12]
    return f"{TEMP_ROOT}/dcray-{digest}"


def raylet_logs(job_id: str, ph: PlacedHost, index: int) -> tuple[LogFile, ...]:
    logs = f"{temp_dir(job_id, ph.name)}/session_latest/logs"
    return (
        LogFile(f"{logs}/raylet.out", "stdout", RAYLET_ROLE, index=index),
        LogFile(f"{logs}/raylet.err", "stderr", RAYLET_ROLE, index=index),
    )


def ray_command(python: str) -> tuple[str, ...]:
    # A host with its own interpreter gets that interpreter's Ray, not PATH's.
    if python == DEFAULT_PYTHON:
        return ("ray",)
    return (python, "-m", "ray.scripts.scripts")


def dashboard(p: Placement) -> tuple[str, int]:
    """(listen address, port) of the head's dashboard."""
    spec = p.spec
    port = spec.ray_dashboard_port or p.master_port + 1
    return spec.ray_dashboard_host or DEFAULT_DASHBOARD_HOST, port


def dashboard_url(p: Placement) -> str:
    """Where to open the dashboard: the head's address unless it listens on one host."""
    listen, port = dashboard(p)
    shown = p.first.address if listen in ("0.0.0.0", "::") else listen
    return f"http://{shown}:{port}"


def dashboard_target(plan: JobPlan) -> tuple[str, str, int] | None:
    """(head host, address to reach from the head, port) of a Ray job's dashboard, read
    back from the head's ``ray start`` flags (written by :func:`start_argv`); None for
    another kind. What ``plan`` and the jobs screen offer to forward."""
    if plan.kind is not JobKind.RAY:
        return None
    head = next((la for la in plan.launches if la.role == DRIVER_ROLE), None)
    if head is None:
        return None
    script = " ".join(head.argv)
    port = re.search(r"--dashboard-port\s+'?(\d+)", script)
    listen = re.search(r"--dashboard-host\s+'?([^\s']+)", script)
    if port is None:
        return None
    address = listen.group(1) if listen else DEFAULT_DASHBOARD_HOST
    reach = "localhost" if address in ("0.0.0.0", "::", DEFAULT_DASHBOARD_HOST) else address
    return head.host, reach, int(port.group(1))


def port_count(hosts: int) -> int:
    """How many ports from the master port P a Ray job on ``hosts`` hosts uses."""
    return 3 + hosts


def check_ports(p: Placement) -> None:
    count = port_count(len(p.hosts))
    check_port_range(p.master_port, count)
    port = p.spec.ray_dashboard_port
    if port is not None and port != p.master_port + 1 and 0 <= port - p.master_port < count:
        raise JobSpecError(
            "ray_dashboard_port",
            f"{port} is one of the job's Ray ports {p.master_port}..{p.master_port + count - 1}"
            " (GCS, client server, dashboard agents); choose another",
        )


def start_argv(p: Placement, ph: PlacedHost, k: int) -> tuple[str, ...]:
    """``ray start ... --block`` for node ``k`` (0: the head)."""
    spec = p.spec
    argv = [*ray_command(ph.host.python), "start", "--block"]
    if k == 0:
        listen, port = dashboard(p)
        argv += [
            "--head",
            "--port",
            str(p.master_port),
            "--dashboard-host",
            listen,
            "--dashboard-port",
            str(port),
            "--ray-client-server-port",
            str(p.master_port + 2),
        ]
    else:
        argv += ["--address", f"{p.first.address}:{p.master_port}"]
    argv += [
        "--node-ip-address",
        ph.address,
        "--temp-dir",
        temp_dir(p.job_id, ph.name),
        "--dashboard-agent-listen-port",
        str(p.master_port + 3 + k),
        "--disable-usage-stats",
    ]
    gpus = spec.gpus_per_host if spec.gpus_per_host is not None else ph.host.gpus
    if isinstance(gpus, int):
        argv += ["--num-gpus", str(gpus)]
    if spec.ray_object_store is not None:
        argv += ["--object-store-memory", str(spec.ray_object_store)]
    return tuple(argv)


def _common(p: Placement, ph: PlacedHost) -> list[str]:
    """The node's temp dir (and its link in the job directory), and the functions."""
    own = shell_word(private_dir(p.job_id, ph.name))
    tmp = shell_word(temp_dir(p.job_id, ph.name))
    return [
        f"mkdir -m 700 -- {own} 2>/dev/null || [ -O {own} ] ||"
        f" {{ echo 'distconsole: '{own}' belongs to another user' >&2; exit 1; }}",
        f"ln -sfn -- {tmp} {shell_word(ph.job_dir + '/' + TEMP_LINK)}",
        FUNCTIONS.replace("WAIT_TENTHS", str(SHUTDOWN_WAIT_S * 10)),
    ]


def head_script(p: Placement, ph: PlacedHost, driver: tuple[str, ...]) -> str:
    out = shell_word(paths.process_stdout(ph.job_dir, NODE_ROLE, 0))
    err = shell_word(paths.process_stderr(ph.job_dir, NODE_ROLE, 0))
    wait = (ph.host.python, "-c", WAIT_NODES, str(len(p.hosts)), str(NODES_WAIT_S))
    lines = [
        f"# distconsole job {p.job_id}: Ray head and driver (console/jobs/plan/ray.py)",
        *_common(p, ph),
        "shutdown_can_end() { :; }",
        f"{shell_join(start_argv(p, ph, 0))} >{out} 2>{err} </dev/null &",
        "ray=$!",
        "driver=",
        'trap \'[ -n "$driver" ] && kill -TERM "$driver" 2>/dev/null; stop_ray; exit 143\''
        " TERM INT HUP",
        f'{shell_join(wait)} "$ray" </dev/null',
        "status=$?",
        'if [ "$status" -ne 0 ]; then stop_ray; exit "$status"; fi',
        f"{shell_join(driver)} </dev/null &",
        "driver=$!",
        'while alive "$driver"; do',
        '  if ! alive "$ray"; then',
        '    echo "distconsole: the Ray head node ended while the driver ran;'
        ' stopping the driver" >&2',
        '    kill -TERM "$driver" 2>/dev/null',
        "  fi",
        "  sleep 0.5",
        "done",
        'wait "$driver"',
        "status=$?",
        'echo "distconsole: the driver ended (status $status); stopping the Ray cluster" >&2',
        "stop_ray",
        'exit "$status"',
    ]
    return "\n".join(lines)


def node_script(p: Placement, ph: PlacedHost, k: int) -> str:
    head = p.first.address
    port = p.master_port
    probe = shlex.quote(f"exec 3<>/dev/tcp/{head}/{port}")
    lines = [
        f"# distconsole job {p.job_id}: Ray node {k} (console/jobs/plan/ray.py)",
        *_common(p, ph),
        # A node's ray start drains through the head's GCS: once the head no longer
        # answers, waiting on its own shutdown is waiting for nothing (a stop TERMs the
        # head's processes too).
        f"shutdown_can_end() {{ timeout 1 bash -c {probe} 2>/dev/null; }}",
        f"{shell_join(start_argv(p, ph, k))} </dev/null &",
        "ray=$!",
        "trap 'stop_ray; exit 143' TERM INT HUP",
        # The head's GCS port: seen once, then refused HEAD_GONE_CHECKS times in a row
        # means the head has stopped (the driver ended, or it failed: its exit says so).
        "seen=0; misses=0",
        'while alive "$ray"; do',
        f"  if timeout 2 bash -c {probe} 2>/dev/null; then seen=1; misses=0;"
        ' elif [ "$seen" = 1 ]; then misses=$((misses+1)); fi',
        f'  if [ "$misses" -ge {HEAD_GONE_CHECKS} ]; then',
        f'    echo "distconsole: the Ray head at {head}:{port} is gone; stopping this node" >&2',
        # Not stop_ray: with its head gone, ray start's own shutdown drains through the
        # GCS and waits out SHUTDOWN_WAIT_S for nothing.
        "    kill_session",
        '    wait "$ray" 2>/dev/null',
        "    exit 0",
        "  fi",
        "  sleep 1",
        "done",
        'wait "$ray"',
        "status=$?",
        'echo "distconsole: ray start ended on its own (status $status)" >&2',
        "kill_session",
        'exit "$status"',
    ]
    return "\n".join(lines)


def plan_ray(p: Placement) -> JobPlan:
    spec = p.spec
    check_ports(p)
    nodes = len(p.hosts)
    spr, dropped = step_split(spec.total_steps, nodes)
    args = substitute(
        spec.args, {"steps_per_rank": spr, "total_steps": spec.total_steps, "world_size": nodes}
    )
    head = p.first
    address = f"{head.address}:{p.master_port}"
    launches: list[RankLaunch] = []
    logs: tuple[LogFile, ...]
    for k, ph in enumerate(p.hosts):
        fixed = {
            **distconsole_env(p.job_id, ph.job_dir, nodes, spec.total_steps, spr),
            "RAY_ADDRESS": address,
            "DISTCONSOLE_RAY_NODES": str(nodes),
        }
        env = job_env(ph, spec, defaults={"RAY_USAGE_STATS_ENABLED": "0"}, fixed=fixed)
        if k == 0:
            driver = program_argv(spec, ph.host.python, ph.job_dir, args)
            argv = ("bash", "-c", head_script(p, ph, driver), HEAD_WRAPPER)
            role = DRIVER_ROLE
            logs = (
                LogFile(paths.process_stdout(ph.job_dir, role, 0), "stdout", role, index=0),
                LogFile(paths.process_stderr(ph.job_dir, role, 0), "stderr", role, index=0),
                LogFile(
                    paths.process_stdout(ph.job_dir, NODE_ROLE, 0), "stdout", NODE_ROLE, index=0
                ),
                LogFile(
                    paths.process_stderr(ph.job_dir, NODE_ROLE, 0), "stderr", NODE_ROLE, index=0
                ),
            )
        else:
            argv = ("bash", "-c", node_script(p, ph, k), NODE_WRAPPER)
            role = NODE_ROLE
            logs = (
                LogFile(paths.process_stdout(ph.job_dir, role, k), "stdout", role, index=k),
                LogFile(paths.process_stderr(ph.job_dir, role, k), "stderr", role, index=k),
            )
        launches.append(
            RankLaunch(
                host=ph.name,
                role=role,
                index=0 if k == 0 else k,
                argv=argv,
                env=env,
                cwd=ph.cwd,
                log_paths=logs + raylet_logs(p.job_id, ph, k),
            )
        )
    warnings = [*p.warnings, f"Ray dashboard: {dashboard_url(p)} (on {head.name})"]
    return JobPlan(
        job_id=p.job_id,
        name=spec.display_name,
        kind=JobKind.RAY,
        world_size=nodes,
        launches=tuple(launches),
        job_dirs=p.job_dirs,
        master_addr=head.address,
        master_port=p.master_port,
        total_steps=spec.total_steps,
        steps_per_rank=spr,
        steps_dropped=dropped,
        hosts_involved=tuple(h.name for h in p.hosts),
        warnings=tuple(warnings),
        uploads=example_uploads(spec, [(head.name, head.job_dir)]),
        fail_fast=spec.fail_fast,
    )
