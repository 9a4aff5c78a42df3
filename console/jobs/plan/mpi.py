"""MPI and Horovod: ONE launcher (``mpirun`` or ``horovodrun``) on the first host (Horovod
elastic with ``--rendezvous-host``: horovodrun on that host, horovod_elastic.py).

The launcher runs on a cluster host, not on the console's machine, because horovodrun's
Gloo rendezvous publishes the launcher's own address to every rank. The launcher's
environment is the job environment; ``mpirun -x NAME`` forwards each variable to every
rank (horovodrun forwards its whole environment itself).

Every rank runs through the wrapper of ``console/jobs/plan/mpi_ranks.py`` on its own host: its
host's setup line, working directory, paths with ``~/`` and inventory ``env``, and its
stdout/stderr teed into ``JOB_DIR/ranks/rank.R/stdout|stderr`` in that host's job
directory (the plan lists each file with the host it is on). Launcher-side per-rank
files (``--output-filename``) are not used: Open MPI's daemons write them at the
launcher's path on every node, which with per-host homes is another user's directory.
The ranks hand the launcher none of their output (mpi_ranks.py ``_arm``), so the
launcher's own files hold its own messages only and each rank's line is read once.

ssh from the launcher: mpirun and horovodrun pass ONE ``-p`` to every ssh they start,
including the one to the launcher's own address when they do not recognise it as local
(any 127.0.0.x but 127.0.0.1, or an address that is not the host's name). So a port is
planned only when every host agrees on it. When hosts differ in user or port, ``-H``
names them by inventory name, which the launcher host's ``~/.ssh/config`` maps to
address, port and user (``distconsole keys HOSTS`` writes those entries; pre-flight
checks them). The inventory's ``identity_file`` is a path on the console's machine,
never passed: the launcher host reaches the others with its own key, agent or config.
"""

from __future__ import annotations

from collections.abc import Callable

from console.errors import JobSpecError
from console.inventory import Host
from console.jobs import paths
from console.jobs.models import JobKind, JobPlan, LogFile, RankLaunch
from console.jobs.plan import horovod_elastic, mpi_secrets
from console.jobs.plan.mpi_ranks import (
    host_list,
    per_host_accounts,
    rank_argv,
    rank_exports,
    rank_files,
    rank_script,
)
from console.jobs.plan.placement import (
    RESTART_VAR,
    PlacedHost,
    Placement,
    checkpoint_env,
    distconsole_env,
    example_uploads,
    job_env,
    max_restarts,
    program_argv,
    step_split,
    substitute,
)

ROLE = "launcher"
THREAD_CAPS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# ``-x NAME`` forwards the launcher's value, and for a name the launcher's environment
# lacks mpirun prints "Warning: could not find environment variable" (issue 23: every
# job on hosts without LD_LIBRARY_PATH). So -x names only what the launcher surely has:
# PATH (every ssh session sets it) and the job's environment (the launcher's wrapper
# exports each of those). A rank's LD_LIBRARY_PATH is its own host's: the environment
# its host's ssh session starts with, then that host's setup line, which the rank
# wrapper runs (mpi_ranks.py); library paths are paths on that host. One set in the
# job's env (--env, the inventory's env) is forwarded like every other variable.
ALWAYS_FORWARDED = ("PATH",)
DEFAULT_SSH_PORT = 22


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


def _account(h: Host) -> str:
    return f"{h.user or 'ssh default user'}, port {h.port or DEFAULT_SSH_PORT}"


def cluster_warnings(p: Placement) -> list[str]:
    """What the launcher's ssh needs that the plan cannot give."""
    if len(p.hosts) < 2:
        return []
    launcher = horovod_elastic.driver(p) if p.spec.kind is JobKind.HOROVOD else p.first
    warnings: list[str] = []
    if per_host_accounts(p):
        warnings.append(
            "hosts differ in user or ssh port (inventory: "
            f"{_described(p, _account)}); "
            f"{launcher.name} reaches each by its inventory name through its ~/.ssh/config "
            f"(`distconsole keys HOSTS --host {','.join(h.name for h in p.hosts)}` writes it)"
        )
    keys = sorted({h.host.identity_file for h in p.hosts if h.host.identity_file})
    if keys:
        warnings.append(
            f"identity_file {', '.join(keys)} is a path on this console's machine and is not "
            f"passed to the launcher; {launcher.name} reaches the other hosts with its own "
            "key (ssh agent or ~/.ssh/config)"
        )
    return warnings


def _env(p: Placement, placed: PlacedHost, world_size: int, spr: int | None) -> dict[str, str]:
    spec = p.spec
    defaults = dict.fromkeys(THREAD_CAPS, "1")
    found = interfaces(p)
    if found:
        defaults["NCCL_SOCKET_IFNAME"] = ",".join(found)
    fixed = distconsole_env(p.job_id, placed.job_dir, world_size, spec.total_steps, spr)
    fixed.update(checkpoint_env(spec, placed.job_dir))
    return job_env(placed, spec, defaults=defaults, fixed=fixed)


def mpirun_argv(p: Placement, env: dict[str, str], program: tuple[str, ...]) -> tuple[str, ...]:
    argv: list[str] = [
        "mpirun",
        "-np",
        str(p.total_slots),
        "-H",
        host_list(p),
        "--bind-to",
        "none",
    ]
    found = interfaces(p)
    if found:
        joined = ",".join(found)
        argv += ["--mca", "btl_tcp_if_include", joined, "--mca", "oob_tcp_if_include", joined]
    port = ssh_port(p)
    if port is not None:
        argv += ["--mca", "plm_rsh_args", f"-p {port}"]
    forwarded: list[str] = []
    # The restart's number (the wrapper sets it; --max-restarts re-runs mpirun).
    restart = (RESTART_VAR,) if max_restarts(p) else ()
    for name in (*ALWAYS_FORWARDED, *env, *restart):
        if name not in forwarded:
            forwarded.append(name)
            argv += ["-x", name]
    return (*argv, *program)


def horovodrun_argv(p: Placement, program: tuple[str, ...]) -> tuple[str, ...]:
    spec = p.spec
    elastic = horovod_elastic.uses_elastic(p)
    argv: list[str] = ["horovodrun", "-np", str(p.total_slots)]
    if not elastic:  # under Horovod elastic the discovery script names the hosts
        argv += ["-H", host_list(p)]
    port = ssh_port(p)
    if port is not None:
        argv += ["-p", str(port)]
    for nic in interfaces(p):
        argv += ["--network-interface", nic]
    if elastic:
        return horovod_elastic.launcher_argv(argv, program, p)
    argv.append("--gloo" if spec.horovod_launcher == "gloo" else "--mpi")
    return (*argv, *program)


def require_distinct_addresses(p: Placement) -> None:
    """-H names hosts by address when every host has the same user and port: two
    inventory hosts on one address (containers behind different ports) would silently
    become one machine. (The demo gives each of its hosts its own loopback address for
    this reason.)"""
    if per_host_accounts(p):
        return  # -H names hosts by inventory name
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
    envs = {h.name: _env(p, h, world_size, spr) for h in p.hosts}
    # Under horovodrun --gloo the user's and the inventory's values go in a file per
    # host, not in its environment nor in the rank wrapper (both end up in argv).
    # Under mpirun a host's inventory values that differ from the launcher's (they were
    # in the wrapper's text, in every rank's argv).
    hidden = mpi_secrets.hidden_env(p, envs, launcher.name)
    gone = mpi_secrets.hidden_names(hidden) if mpi_secrets.uses_env_file(p) else frozenset()
    env = {k: v for k, v in envs[launcher.name].items() if k not in gone}

    def seen_by_wrapper(host: str) -> dict[str, str]:
        """``host``'s env less what its file sets: read as the launcher's (no export)."""
        own = dict(envs[host])
        for key in hidden.get(host, {}):
            if key in env:
                own[key] = env[key]
            else:
                own.pop(key, None)
        return own

    # Each host's rank runs its own python, paths and env (see console/jobs/plan/mpi_ranks.py).
    programs = {h.name: program_argv(spec, h.host.python, h.job_dir, args) for h in p.hosts}
    exports = {h.name: rank_exports(env, seen_by_wrapper(h.name)) for h in p.hosts}
    horovod_elastic.check_restarts(p)
    elastic = horovod_elastic.uses_elastic(p)
    script = rank_script(p, programs, exports, elastic=elastic, env_file=bool(hidden))
    wrapped = rank_argv(script)
    horovod = spec.kind is JobKind.HOROVOD
    argv = horovodrun_argv(p, wrapped) if horovod else mpirun_argv(p, env, wrapped)
    # Horovod elastic's launcher is not re-run by the supervisors (horovod_elastic.py).
    role = horovod_elastic.ROLE if elastic else ROLE
    # horovodrun on the rendezvous host when there is one (its env is still the first
    # host's, whose values the ranks' own exports are measured against).
    driver = horovod_elastic.driver(p) if horovod else launcher
    logs = (
        LogFile(paths.process_stdout(driver.job_dir, role, 0), "stdout", "launcher"),
        LogFile(paths.process_stderr(driver.job_dir, role, 0), "stderr", "launcher"),
        *rank_files(p),
    )
    warnings = list(p.warnings) + cluster_warnings(p)
    not_elastic = horovod_elastic.why_not(p)
    notes: tuple[str, ...] = (
        (horovod_elastic.note(p),) if elastic else (not_elastic,) if not_elastic else ()
    )
    several = len(p.hosts) > 1 or p.rendezvous is not None
    notes += horovod_elastic.first_host_notes(p) if elastic and several else ()
    uploads = example_uploads(spec, ((h.name, h.job_dir) for h in p.hosts))
    uploads += mpi_secrets.env_file_uploads(p, hidden)
    launch = RankLaunch(
        host=driver.name,
        role=role,
        index=0,
        argv=argv,
        env=env,
        cwd=driver.cwd,
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
        master_addr=driver.address,
        master_port=None,
        total_steps=spec.total_steps,
        steps_per_rank=spr,
        steps_dropped=dropped,
        hosts_involved=tuple(h.name for h in p.hosts),
        warnings=tuple(warnings),
        uploads=uploads,
        fail_fast=spec.fail_fast,
        max_restarts=max_restarts(p),
        min_hosts=horovod_elastic.min_hosts(p) if horovod else 0,  # Horovod elastic's hosts
        rendezvous_host=p.rendezvous.name if horovod and p.rendezvous else None,
        notes=notes,
    )
