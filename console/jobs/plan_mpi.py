"""MPI and Horovod: ONE launcher (``mpirun`` or ``horovodrun``) on the first host.

The launcher runs on a cluster host, not on the console's machine, because horovodrun's
Gloo rendezvous publishes the launcher's own address to every rank. The launcher's
environment is the job environment; ``mpirun -x NAME`` forwards each variable to every
rank (horovodrun forwards its whole environment itself).

Per-rank output (checked against Open MPI 4.1 and horovod 0.28.1's gloo_run) is read
from per-rank files, not from tagged launcher output: ``--tag-output`` tags every chunk
a rank writes, so an unbuffered ``print`` (PYTHONUNBUFFERED=1) comes out as several
tagged fragments on one line, in the launcher's output and in the rank files alike.
``mpirun --output-filename D`` writes ``D/1/rank.<r>/stdout|stderr`` with ``r``
zero-padded to the digits of ``np``; horovodrun --gloo writes ``D/rank.<r>/...`` padded
to the digits of ``np - 1`` (and cannot do so for np=1).

Open MPI's daemon on each host writes that host's rank files itself, at the launcher's
path: the plan lists them on the launcher host, which holds them all when the home
directory is shared (NFS), as on a usual MPI cluster (one account, same paths).

ssh from the launcher: mpirun and horovodrun pass ONE ``-p`` to every ssh they start,
including the one to the launcher's own address when they do not recognise it as local
(any 127.0.0.x but 127.0.0.1, or an address that is not the host's name). So a port is
planned only when every host agrees on it. The inventory's ``identity_file`` is a path
on the console's machine, never passed: the launcher host reaches the others with its
own key, agent or ~/.ssh/config.
"""

from __future__ import annotations

from collections.abc import Callable

from console.errors import JobSpecError
from console.inventory import Host
from console.jobs import paths
from console.jobs.models import JobKind, JobPlan, LogFile, RankLaunch
from console.jobs.placement import (
    PlacedHost,
    Placement,
    distconsole_env,
    example_uploads,
    job_env,
    program_argv,
    step_split,
    substitute,
)

ROLE = "launcher"
THREAD_CAPS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
ALWAYS_FORWARDED = ("PATH", "LD_LIBRARY_PATH")
DEFAULT_SSH_PORT = 22


def host_list(p: Placement) -> str:
    return ",".join(f"{h.address}:{h.slots}" for h in p.hosts)


def interfaces(p: Placement) -> list[str]:
    found: list[str] = []
    for h in p.hosts:
        if h.interface and h.interface not in found:
            found.append(h.interface)
    return found


def _described(p: Placement, value: Callable[[Host], object]) -> str:
    return ", ".join(f"{h.name} ({value(h.host)})" for h in p.hosts)


def ssh_port(p: Placement) -> int | None:
    """The ``-p`` for the launcher's ssh: the one port every host uses, unless it is 22.

    Every host counts, the launcher's too (see the module doc).
    """
    ports = {h.host.port or DEFAULT_SSH_PORT for h in p.hosts}
    if len(ports) != 1:
        return None
    only = ports.pop()
    return only if only != DEFAULT_SSH_PORT else None


def cluster_warnings(p: Placement) -> list[str]:
    """What the launcher's ssh and the ranks on other hosts need that the plan cannot give."""
    if len(p.hosts) < 2:
        return []
    launcher = p.first
    warnings: list[str] = []
    if len({h.host.port or DEFAULT_SSH_PORT for h in p.hosts}) > 1:
        warnings.append(
            "hosts use different ssh ports (inventory field 'port': "
            f"{_described(p, lambda h: h.port or DEFAULT_SSH_PORT)}); the launcher passes "
            f"one -p to every host's ssh, so none is passed: {launcher.name}'s "
            "~/.ssh/config must map each host to its port"
        )
    keys = sorted({h.host.identity_file for h in p.hosts if h.host.identity_file})
    if keys:
        warnings.append(
            f"identity_file {', '.join(keys)} is a path on this console's machine and is not "
            f"passed to the launcher; {launcher.name} reaches the other hosts with its own "
            "key (ssh agent or ~/.ssh/config)"
        )
    users = {h.host.user for h in p.hosts if h.host.user}
    if len(users) > 1:
        warnings.append(
            "hosts use different users (inventory field 'user': "
            f"{_described(p, lambda h: h.user or 'ssh default')}); MPI needs one account "
            f"on every host: {launcher.name}'s ssh logs in as its own "
            "user unless its ~/.ssh/config says otherwise"
        )
    if len({h.host.work_dir for h in p.hosts}) > 1:
        warnings.append(
            f"hosts use different work_dirs ({_described(p, lambda h: h.work_dir)}); every "
            f"rank runs in {launcher.name}'s ({launcher.host.work_dir}) and its job directory"
        )
    return warnings


def pad(rank: int, width: int) -> str:
    return str(rank).zfill(width)


def rank_logs(
    p: Placement, directory: str, width: int, *, openmpi_layout: bool
) -> tuple[LogFile, ...]:
    """One stdout and one stderr file per rank, in the launcher's job directory."""
    logs: list[LogFile] = []
    rank = 0
    for h in p.hosts:
        for local in range(h.slots):
            base = f"{directory}/1" if openmpi_layout else directory
            rank_dir = f"{base}/rank.{pad(rank, width)}"
            logs.append(LogFile(f"{rank_dir}/stdout", "stdout", "rank", rank, local))
            logs.append(LogFile(f"{rank_dir}/stderr", "stderr", "rank", rank, local))
            rank += 1
    return tuple(logs)


def _env(p: Placement, launcher: PlacedHost, world_size: int, spr: int | None) -> dict[str, str]:
    spec = p.spec
    defaults = dict.fromkeys(THREAD_CAPS, "1")
    found = interfaces(p)
    if found:
        defaults["NCCL_SOCKET_IFNAME"] = ",".join(found)
    fixed = distconsole_env(p.job_id, launcher.job_dir, world_size, spec.total_steps, spr)
    return job_env(launcher, spec, defaults=defaults, fixed=fixed)


def mpirun_argv(p: Placement, env: dict[str, str], program: tuple[str, ...]) -> tuple[str, ...]:
    launcher = p.first
    argv: list[str] = [
        "mpirun",
        "-np",
        str(p.total_slots),
        "-H",
        host_list(p),
        "--bind-to",
        "none",
        "--output-filename",
        paths.ranks_dir(launcher.job_dir),
    ]
    found = interfaces(p)
    if found:
        joined = ",".join(found)
        argv += ["--mca", "btl_tcp_if_include", joined, "--mca", "oob_tcp_if_include", joined]
    port = ssh_port(p)
    if port is not None:
        argv += ["--mca", "plm_rsh_args", f"-p {port}"]
    forwarded: list[str] = []
    for name in (*ALWAYS_FORWARDED, *env):
        if name not in forwarded:
            forwarded.append(name)
            argv += ["-x", name]
    return (*argv, *program)


def horovodrun_argv(p: Placement, program: tuple[str, ...]) -> tuple[str, ...]:
    spec = p.spec
    launcher = p.first
    argv: list[str] = ["horovodrun", "-np", str(p.total_slots), "-H", host_list(p)]
    port = ssh_port(p)
    if port is not None:
        argv += ["-p", str(port)]
    for nic in interfaces(p):
        argv += ["--network-interface", nic]
    argv.append("--gloo" if spec.horovod_launcher == "gloo" else "--mpi")
    if spec.horovod_launcher == "mpi" or p.total_slots > 1:
        argv += ["--output-filename", paths.ranks_dir(launcher.job_dir)]
    return (*argv, *program)


def require_distinct_addresses(p: Placement) -> None:
    """-H names hosts by address only: two inventory hosts on one address (containers
    behind different ports) would silently become one machine. (The demo gives each of
    its hosts its own loopback address for this reason.)"""
    seen: dict[str, str] = {}
    for h in p.hosts:
        if h.address in seen:
            raise JobSpecError(
                "hosts",
                f"{seen[h.address]} and {h.name} share the address {h.address}; "
                f"{'horovodrun' if p.spec.kind is JobKind.HOROVOD else 'mpirun'} names hosts "
                "by address (-H), so give each host its own address or ~/.ssh/config alias",
            )
        seen[h.address] = h.name


def plan_mpi(p: Placement) -> JobPlan:
    spec = p.spec
    require_distinct_addresses(p)
    launcher = p.first
    world_size = p.total_slots
    spr, dropped = step_split(spec.total_steps, world_size)
    args = substitute(
        spec.args,
        {"steps_per_rank": spr, "total_steps": spec.total_steps, "world_size": world_size},
    )
    program = program_argv(spec, launcher.host.python, launcher.job_dir, args)
    env = _env(p, launcher, world_size, spr)
    horovod = spec.kind is JobKind.HOROVOD
    directory = paths.ranks_dir(launcher.job_dir)
    if horovod and spec.horovod_launcher == "gloo":
        argv = horovodrun_argv(p, program)
        rank_files = (
            rank_logs(p, directory, len(str(world_size - 1)), openmpi_layout=False)
            if world_size > 1
            else ()
        )
    else:
        argv = horovodrun_argv(p, program) if horovod else mpirun_argv(p, env, program)
        rank_files = rank_logs(p, directory, len(str(world_size)), openmpi_layout=True)
    logs = (
        LogFile(paths.process_stdout(launcher.job_dir, ROLE, 0), "stdout", "launcher"),
        LogFile(paths.process_stderr(launcher.job_dir, ROLE, 0), "stderr", "launcher"),
        *rank_files,
    )
    warnings = list(p.warnings) + cluster_warnings(p)
    differing = [h.name for h in p.hosts[1:] if h.host.env != launcher.host.env]
    if differing:
        warnings.append(
            f"inventory env of {', '.join(differing)} differs from the launcher host "
            f"{launcher.name}'s; every rank gets the launcher's"
        )
    # Ranks on other hosts run the launcher's paths, so the example goes there too.
    uploads = example_uploads(spec, ((h.name, launcher.job_dir) for h in p.hosts))
    launch = RankLaunch(
        host=launcher.name,
        role=ROLE,
        index=0,
        argv=argv,
        env=env,
        cwd=launcher.cwd,
        log_paths=logs,
        ranks=tuple(range(world_size)),
    )
    return JobPlan(
        job_id=p.job_id,
        name=spec.display_name,
        kind=spec.kind,
        world_size=world_size,
        launches=(launch,),
        job_dirs=p.job_dirs,
        master_addr=launcher.address,
        master_port=None,
        total_steps=spec.total_steps,
        steps_per_rank=spr,
        steps_dropped=dropped,
        hosts_involved=tuple(h.name for h in p.hosts),
        warnings=tuple(warnings),
        uploads=uploads,
        fail_fast=spec.fail_fast,
    )
