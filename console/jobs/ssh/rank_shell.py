"""A shell on the host of one rank of a job, in its working directory with its
environment (issue 10 part 5), as the system ``ssh -t`` command the console hands the
terminal to (``App.suspend()``), then takes back.

Host keys are verified as the console verifies them: the inventory's ``known_hosts``
file (else OpenSSH's own) with ``StrictHostKeyChecking=yes``; the inventory's user, port,
identity file and ProxyJump. A host with ``insecure_host_keys`` is refused: an
interactive shell is not where to stop checking. On the host the shell runs the host's
setup line, enters the job's working directory and exports the rank's variables from
the plan (the launcher's environment for MPI/Horovod ranks, with ``DISTCONSOLE_RANK``).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from console.errors import JobError
from console.inventory import Host, Inventory
from console.jobs.models import JobPlan, RankLaunch
from console.jobs.ssh.remote_ops import HOME_EXPANDED_VARS
from console.transport.ship import shell_word, with_setup

RANK_VAR = "DISTCONSOLE_RANK"


@dataclass(frozen=True, slots=True)
class RankPlace:
    host: str
    cwd: str
    env: dict[str, str]


ShellTarget = int | str  # a global rank, or a task of a job without ranks ("worker1")


def shell_targets(plan: JobPlan) -> list[tuple[ShellTarget, str]]:
    """Every rank of the job (else every task: ``ps0``, ``worker1``) with the host it
    runs on, ranks in order: what the console's rank chooser offers."""
    ranks: dict[int, str] = {}
    tasks: dict[str, str] = {}
    for launch in plan.launches:
        for log in launch.log_paths:
            if log.rank is not None:
                ranks.setdefault(log.rank, log.host or launch.host)
        for rank in launch.ranks:
            ranks.setdefault(rank, launch.host)
        if not launch.ranks and not any(log.rank is not None for log in launch.log_paths):
            tasks.setdefault(task_key(launch), launch.host)
    return [*sorted(ranks.items()), *tasks.items()]


def task_key(launch: RankLaunch) -> str:
    """A rankless process's name as the logs key its lines (``logs.models.rank_key``)."""
    return f"{launch.role}{launch.index}"


def rank_place(plan: JobPlan, rank: ShellTarget | None) -> RankPlace:
    """Where ``rank`` runs (None: the first process of the job), from the plan alone."""
    if rank is None:
        first = plan.launches[0]
        return RankPlace(first.host, first.cwd, dict(first.env))
    for launch in plan.launches:
        if isinstance(rank, str):
            if task_key(launch) == rank:
                return RankPlace(launch.host, launch.cwd, dict(launch.env))
            continue
        for log in launch.log_paths:
            if log.rank == rank:
                return _place(launch, log.host or launch.host, rank)
        # Ranks without a file of their own (torchrun's) run on their launcher's host;
        # MPI/Horovod ranks all have one (above), on the host they run on.
        if rank in launch.ranks:
            return _place(launch, launch.host, rank)
    raise JobError(f"job {plan.job_id} has no rank {rank} (world size {plan.world_size})")


def _place(launch: RankLaunch, host: str, rank: int) -> RankPlace:
    return RankPlace(host, launch.cwd, {**launch.env, RANK_VAR: str(rank)})


def remote_command(host: Host, place: RankPlace) -> str:
    """What the remote login shell runs: setup, cd, the rank's env, then a shell."""
    lines = [f"cd -- {shell_word(place.cwd)} || exit 1"]
    for key, value in place.env.items():
        # As the job's wrapper exports them (remote_ops): its ~/ paths expanded.
        word = shell_word(value) if key in HOME_EXPANDED_VARS else shlex.quote(value)
        lines.append(f"export {key}={word}")
    lines.append('exec "${SHELL:-/bin/sh}" -i')
    return with_setup(host.setup, "\n".join(lines), bash=True)


def rank_shell_argv(inventory: Inventory, plan: JobPlan, rank: ShellTarget | None) -> list[str]:
    """``ssh -t ... HOST COMMAND`` for the system ssh; see the module doc."""
    place = rank_place(plan, rank)
    host = inventory.get(place.host)
    if host.is_local:
        raise JobError(f"{host.name} is this machine; open a terminal in {place.cwd}")
    if host.insecure_host_keys:
        raise JobError(
            f"{host.name} has insecure_host_keys in the inventory; a shell is only opened "
            "with its host key verified (add it to known_hosts)"
        )
    argv = ["ssh", "-t", "-o", "StrictHostKeyChecking=yes"]
    if host.known_hosts:
        argv += ["-o", f"UserKnownHostsFile={host.known_hosts}"]
    if host.identity_file:
        argv += ["-i", host.identity_file, "-o", "IdentitiesOnly=yes"]
    if host.port:
        argv += ["-p", str(host.port)]
    if host.user:
        argv += ["-l", host.user]
    if host.proxy_jump:
        argv += ["-J", host.proxy_jump]
    argv += ["-o", f"ConnectTimeout={max(1, int(host.connect_timeout))}"]
    return [*argv, "--", host.address, remote_command(host, place)]
