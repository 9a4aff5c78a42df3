"""A shell on the host of one rank of a job, in its working directory with its
environment (issue 10 part 5), as the system ``ssh -t`` command the console hands the
terminal to (``App.suspend()``), then takes back.

Host keys are verified as the console verifies them: the inventory's ``known_hosts``
file (else OpenSSH's own) with ``StrictHostKeyChecking=yes``; the inventory's user, port,
identity file and ProxyJump. A host with ``insecure_host_keys`` is refused: an
interactive shell is not where to stop checking. On the host the shell runs the host's
setup line, enters the job's working directory and exports the rank's variables from
the plan (the launcher's environment for MPI/Horovod ranks, with ``DISTCONSOLE_RANK``).

The variables (the job's ``--env`` secrets among them) never travel in a command line,
which every user of both machines reads in ``/proc/*/cmdline`` while the shell is open:
a first ``ssh`` (no terminal) writes them from its stdin into a 0600 file in the job's
directory on the host (``shell-TARGET.env.secret``: never packed into a report), which
the shell's ``ssh -t`` sources (:class:`ShellCommand`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from console.errors import JobError
from console.inventory import Host, Inventory
from console.jobs.models import JobPlan, RankLaunch
from console.jobs.plan.mpi_secrets import env_file_path
from console.jobs.ssh.remote_ops import HOME_EXPANDED_VARS
from console.transport.ship import shell_word, with_setup

RANK_VAR = "DISTCONSOLE_RANK"
SHELL_ENV_SUFFIX = ".env.secret"  # .secret: job_pack never sends it


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


@dataclass(frozen=True, slots=True)
class ShellCommand:
    """``upload`` (ssh, no terminal) writes ``env_script`` from its stdin into the 0600
    ``env_file`` on the host; then ``argv`` (``ssh -t``) opens the shell, which sources it."""

    upload: list[str]
    env_script: bytes
    argv: list[str]
    env_file: str


def env_script(place: RankPlace, job_dir: str) -> str:
    """The rank's ``export`` lines, as the job's wrapper writes them (remote_ops: its ~/
    paths expanded), and under horovodrun --gloo its host's ``env.HOST.secret``
    (``plan/mpi_secrets.py``), whose values the ranks read from there."""
    lines = []
    for key, value in place.env.items():
        word = shell_word(value) if key in HOME_EXPANDED_VARS else shlex.quote(value)
        lines.append(f"export {key}={word}")
    secret = shell_word(env_file_path(job_dir, place.host))
    lines.append(f"if [ -r {secret} ]; then . {secret}; fi")
    return "\n".join(lines) + "\n"


def upload_command(env_file: str) -> str:
    """The first ssh's remote command: the file private from its first byte."""
    path, tmp = shell_word(env_file), shell_word(env_file + ".tmp")
    folder = shell_word(env_file.rsplit("/", 1)[0])
    return f"umask 077 && mkdir -p -- {folder} && cat >{tmp} && mv -f -- {tmp} {path}"


def remote_command(host: Host, place: RankPlace, env_file: str) -> str:
    """What the remote login shell runs: setup, cd, the rank's env (its file), a shell."""
    file = shell_word(env_file)
    missing = shlex.quote(f"distconsole: no {env_file}: the job's environment is not set")
    lines = [
        f"cd -- {shell_word(place.cwd)} || exit 1",
        f"if [ -r {file} ]; then . {file}; else echo {missing} >&2; fi",
        'exec "${SHELL:-/bin/sh}" -i',
    ]
    return with_setup(host.setup, "\n".join(lines), bash=True)


def shell_env_file(plan: JobPlan, place: RankPlace, target: ShellTarget | None) -> str:
    job_dir = plan.job_dirs.get(place.host)
    if job_dir is None:
        raise JobError(f"job {plan.job_id} has no job directory on {place.host}")
    label = "job" if target is None else f"rank{target}" if isinstance(target, int) else target
    return f"{job_dir}/shell-{label}{SHELL_ENV_SUFFIX}"


def rank_shell_argv(inventory: Inventory, plan: JobPlan, rank: ShellTarget | None) -> list[str]:
    """``ssh -t ... HOST COMMAND`` for the system ssh (:func:`rank_shell_command`'s)."""
    return rank_shell_command(inventory, plan, rank).argv


def rank_shell_command(
    inventory: Inventory, plan: JobPlan, rank: ShellTarget | None
) -> ShellCommand:
    """The env file's upload and the shell's ``ssh -t``; see the module doc."""
    place = rank_place(plan, rank)
    host = inventory.get(place.host)
    if host.is_local:
        raise JobError(f"{host.name} is this machine; open a terminal in {place.cwd}")
    if host.insecure_host_keys:
        raise JobError(
            f"{host.name} has insecure_host_keys in the inventory; a shell is only opened "
            "with its host key verified (add it to known_hosts)"
        )
    argv = ["-o", "StrictHostKeyChecking=yes"]
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
    file = shell_env_file(plan, place, rank)
    job_dir = plan.job_dirs[place.host]
    return ShellCommand(
        upload=["ssh", "-T", *argv, "--", host.address, upload_command(file)],
        env_script=env_script(place, job_dir).encode(),
        argv=["ssh", "-t", *argv, "--", host.address, remote_command(host, place, file)],
        env_file=file,
    )
