"""Each MPI / Horovod rank runs through a small bash wrapper on its own host.

mpirun and horovodrun start the same argv for every rank, on every host. With per-host
users and homes (``dctest0`` on node0, ``dctest1`` on node1), paths the launcher's shell
expanded (``~/`` -> ``/home/dctest0/...``) mean nothing on node1, and Open MPI's
``--output-filename DIR`` makes each node's daemon write into the launcher's path. So
the rank argv is ``bash -c SCRIPT distconsole-rank``, the script quoted whole (nothing
of it is expanded on the launcher), and on the rank's host it:

1. finds its rank (``OMPI_COMM_WORLD_RANK``, or ``HOROVOD_RANK`` under horovodrun
   --gloo) and, from the plan's rank order (both launchers fill ``-H host:slots`` in
   order), which inventory host it is on;
2. takes ``HOME`` back from the password database: horovodrun --gloo hands every rank
   the launcher's whole environment, ``HOME`` and ``SSH_CONNECTION`` included (seen
   with horovod 0.28.1), and ``~/`` must be this host's home;
3. sends its stdout/stderr into ``JOB_DIR/ranks/rank.R/stdout|stderr`` in ITS host's job
   directory, and ONLY there (the console reads each rank's log from the host it ran on;
   the launcher's own output then holds the launcher's own messages alone, see
   :func:`_arm`);
4. runs that host's ``setup`` line, enters that host's working directory, exports the
   variables whose value differs on that host (its inventory ``env``) and its own job
   paths (``DISTCONSOLE_JOB_DIR``, the hang hook, ...: ``~/`` expanded there), and ``exec``s
   the program with that host's paths and python, so the launcher sees its status.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from console.jobs import paths
from console.jobs.models import LogFile
from console.jobs.plan.mpi_secrets import env_file_name, env_file_path
from console.jobs.plan.placement import (
    CHECKPOINT_VAR,
    HANG_HOOK_VAR,
    HOME_PATH_VARS,
    RESTART_VAR,
    PlacedHost,
    Placement,
)
from console.transport.ship import shell_join, shell_word, with_setup

WRAPPER_NAME = "distconsole-rank"  # $0 of the wrapper: what `ps` shows for it
DEFAULT_SSH_PORT = 22
RANK_SETUP_FAILED = 126
RANK_CWD_FAILED = 127


def per_host_accounts(p: Placement) -> bool:
    """Hosts differ in user or ssh port: the launcher's ssh needs a ~/.ssh/config alias
    per host (``distconsole keys`` writes one named by the inventory name). A rendezvous
    host's user counts (Horovod elastic's driver runs there): its ssh's default user."""
    rdzv = (p.rendezvous,) if p.rendezvous is not None else ()
    users = {h.host.user or "" for h in (*p.hosts, *rdzv)}
    ports = {h.host.port or DEFAULT_SSH_PORT for h in p.hosts}
    return len(users) > 1 or len(ports) > 1


def ssh_name(p: Placement, placed: PlacedHost) -> str:
    """How the launcher names ``placed`` to ssh (in ``-H``): its inventory name when
    accounts differ per host (resolved by the launcher's ~/.ssh/config), else its address."""
    return placed.name if per_host_accounts(p) else placed.address


def host_list(p: Placement) -> str:
    return ",".join(f"{ssh_name(p, h)}:{h.slots}" for h in p.hosts)


def rank_ranges(p: Placement) -> list[tuple[PlacedHost, range]]:
    """The global ranks each host runs, in launcher order (slot by slot, host by host)."""
    out = []
    first = 0
    for h in p.hosts:
        out.append((h, range(first, first + h.slots)))
        first += h.slots
    return out


def rank_files(p: Placement) -> tuple[LogFile, ...]:
    """Each rank's stdout and stderr, on the host the rank runs on."""
    logs: list[LogFile] = []
    for h, ranks in rank_ranges(p):
        for local, rank in enumerate(ranks):
            base = paths.rank_dir(h.job_dir, rank)
            logs.append(LogFile(f"{base}/stdout", "stdout", "rank", rank, local, host=h.name))
            logs.append(LogFile(f"{base}/stderr", "stderr", "rank", rank, local, host=h.name))
    return tuple(logs)


def _pattern(ranks: range) -> str:
    return "|".join(str(r) for r in ranks)


# Under Horovod elastic: this slot's starts, so far (see _elastic_rank).
_COUNT_STARTS = (
    'n=$(( $(cat "$d/starts" 2>/dev/null || echo 0) + 1 )); echo "$n" >"$d/starts"; '
    f"{RESTART_VAR}=$((n - 1)); export {RESTART_VAR}"
)


def _arm(
    h: PlacedHost,
    program: tuple[str, ...],
    exports: Mapping[str, str | None],
    elastic: bool = False,
    env_file: bool = False,
) -> str:
    ranks_dir = shell_word(paths.ranks_dir(h.job_dir))
    body = [f"cd -- {shell_word(h.cwd)} || exit {RANK_CWD_FAILED}"]
    if env_file:
        body += _source_env_file(h)
    for key, value in exports.items():
        if value is None:
            body.append(f"unset {key}")
        else:  # this host's paths: ~/ expanded by this shell, against this host's HOME
            word = shell_word(value) if key in HOME_PATH_VARS else shlex.quote(value)
            body.append(f"export {key}={word}")
    # As the launcher's wrapper does (remote_ops.wrapper_script), on this host.
    if exports.get(CHECKPOINT_VAR):
        body.append(f'mkdir -p -- "${CHECKPOINT_VAR}"')
    if exports.get(HANG_HOOK_VAR):
        body.append(f'export PYTHONPATH="${HANG_HOOK_VAR}${{PYTHONPATH:+:$PYTHONPATH}}"')
    body.append(f"exec {shell_join(program)} </dev/null")
    failed = shlex.quote(f"distconsole: {h.name}'s setup line failed: {h.host.setup or ''}")
    on_failure = f"echo {failed} >&2; exit {RANK_SETUP_FAILED}"
    lines = [
        f'd={ranks_dir}/rank."$r"',  # paths.rank_dir
        # The rank's files private (the tees open them under this umask); the program
        # gets the login umask back.
        "distconsole_umask=$(umask); umask 0077",
        f'mkdir -p -- "$d" || exit {RANK_CWD_FAILED}',
        *((_COUNT_STARTS,) if elastic else ()),
        # The rank's output goes to its own files and NOT on to the launcher (issue 23):
        # mpirun and horovodrun copy whatever a rank writes into their own output, so
        # every line showed twice, once under its rank and once as the launcher. Not
        # handing it to the launcher at all is what works for every launcher: mpirun
        # tags forwarded lines only with --tag-output and then per write (a line in two
        # writes gets two tags), horovodrun --gloo tags per line, horovodrun --mpi as
        # its mpirun does, and a filter would also drop what this wrapper itself says
        # before its files exist. So the launcher's output is the launcher's own
        # messages (mpirun's warnings, errors and failure report) and no rank's line
        # crosses the network twice. `logs` and `launch` read each rank's files on its
        # host. The stdout reader marks the rank done once the program's stdout closes,
        # however it ended: the log follower on this host stops there. It ignores TERM
        # so that a stop's TERM to everything of the job leaves it to finish at EOF.
        # Appended, and the done mark cleared: a launcher run again (--max-restarts)
        # goes on in the same files.
        f'rm -f "$d/{paths.RANK_DONE}"; '
        f'exec > >(trap \'\' TERM INT HUP; cat >>"$d/stdout"; : >"$d/{paths.RANK_DONE}")'
        ' 2>>"$d/stderr"',
        'umask "$distconsole_umask"',
        with_setup(h.host.setup, "\n".join(body), on_failure=on_failure),
    ]
    return "\n".join(lines)


ENV_FILE_WAIT_S = 30  # the start on this host writes it while the launcher's ssh arrives


def _source_env_file(h: PlacedHost) -> list[str]:
    """The user's values from this host's 0600 file (mpi_secrets.py): never in an argv."""
    file = shell_word(env_file_path(h.job_dir, h.name))
    missing = shlex.quote(
        f"distconsole: {h.name}: no {env_file_name(h.name)} in the job's directory "
        f"after {ENV_FILE_WAIT_S} s (the job's --env values)"
    )
    tries = ENV_FILE_WAIT_S * 10
    return [
        f"n=0; while [ ! -r {file} ] && [ $n -lt {tries} ]; do sleep 0.1; n=$((n + 1)); done",
        f". {file} || {{ echo {missing} >&2; exit {RANK_SETUP_FAILED}; }}",
    ]


def env_differences(base: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str | None]:
    """What a host's rank must export (or unset: None) to turn ``base`` into ``own``."""
    changes: dict[str, str | None] = {k: v for k, v in own.items() if base.get(k) != v}
    changes.update({k: None for k in base if k not in own})
    return changes


def rank_exports(base: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str | None]:
    """What a host's rank exports: :func:`env_differences`, and always its own host's
    paths (``HOME_PATH_VARS``): the launcher forwards the ones its shell expanded
    (``/home/launcher-user/...``), which on another host are another user's."""
    changes = env_differences(base, own)
    changes.update({k: v for k, v in own.items() if k in HOME_PATH_VARS})
    return changes


def _elastic_rank(p: Placement) -> list[str]:
    """Under Horovod elastic a worker's rank is the driver's latest assignment, which a
    reset may move to another host: the wrapper finds its host by the name horovodrun
    started it for (``HOROVOD_HOSTNAME``, a line of the discovery script) and its files
    by the planned rank of that host's slot (``HOROVOD_LOCAL_RANK``), so each slot keeps
    its planned rank's files whatever rank Horovod gives it. A started slot counts its
    starts there: a slot started again is a restart (``DISTCONSOLE_RESTART_COUNT``)."""
    lines = ['case "${HOROVOD_HOSTNAME:-}" in']
    for h, ranks in rank_ranges(p):
        lines.append(f"{shlex.quote(ssh_name(p, h))}) r=$(({ranks.start} + HOROVOD_LOCAL_RANK)) ;;")
    lines.append("esac")
    return lines


def rank_script(
    p: Placement,
    programs: Mapping[str, tuple[str, ...]],
    exports: Mapping[str, Mapping[str, str | None]],
    *,
    elastic: bool = False,
    env_file: bool = False,
) -> str:
    """The wrapper's bash text; ``programs``/``exports`` per host name (see module doc);
    ``env_file``: each rank sources its host's ``env.HOST.secret`` (mpi_secrets.py)."""
    lines = [
        f"# distconsole job {p.job_id}: one rank (console/jobs/plan/mpi_ranks.py)",
        'r="${OMPI_COMM_WORLD_RANK:-${HOROVOD_RANK:-}}"',
        *(_elastic_rank(p) if elastic else ()),
        # horovodrun --gloo forwards the launcher's HOME: take this user's own back.
        'h="$(getent passwd "$(id -u)" | cut -d: -f6)"',
        'if [ -n "$h" ]; then HOME="$h"; export HOME; fi',
        'case "$r" in',
    ]
    for h, ranks in rank_ranges(p):
        lines.append(f"{_pattern(ranks)})")
        lines.append(_arm(h, programs[h.name], exports.get(h.name, {}), elastic, env_file))
        lines.append(";;")
    lines += [
        "*)",
        f"echo \"distconsole: rank '$r' is not in the plan of job \"{shlex.quote(p.job_id)} >&2",
        "exit 1",
        ";;",
        "esac",
    ]
    return "\n".join(lines)


def rank_argv(script: str) -> tuple[str, ...]:
    return ("bash", "-c", script, WRAPPER_NAME)
