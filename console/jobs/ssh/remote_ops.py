"""Command lines the runner sends to hosts: start, watch, inspect, stop, follow, tail.

Every operation is ``python3 -u -c <jobctl.py> OP JSON`` (``console/hostprogs/jobctl/program.py``,
shipped by :func:`console.transport.ship.shipment`): the arguments travel as one JSON word
quoted with :func:`shlex.quote`, so nothing the user typed is ever parsed by the remote
shell. The per-process wrapper is the one place that is shell: it runs the host's
``setup`` line (a shell snippet by definition, joined by the one setup composer
:func:`console.transport.ship.with_setup`), then the program with every word quoted by
:func:`console.jobs.paths.shell_join`.
"""

from __future__ import annotations

import base64
import functools
import json
import shlex
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from console.errors import JobError
from console.hostprogs.jobctl import program as jobctl
from console.hostprogs.jobctl.common import PRIVATE_UMASK, USER_UMASK_VAR
from console.inventory import Host
from console.jobs import paths
from console.jobs.models import JobPlan, LogFile, RankLaunch
from console.jobs.notify import masked_document
from console.jobs.paths import (
    process_stderr,
    process_stdout,
    shell_join,
    shell_word,
)
from console.jobs.plan.placement import CHECKPOINT_VAR, HANG_HOOK_VAR, HOME_PATH_VARS, RESTART_VAR
from console.jobs.plan_json import plan_hosts, plan_to_json
from console.names import JOB_ID_VAR, env_name_problem
from console.transport.ship import HostProgram, shipment, with_setup

PROCESS_VAR = "DISTCONSOLE_PROCESS"
SETUP_FAILED = 126  # exit status recorded when the host's setup line fails
CWD_FAILED = 127  # ... when the working directory cannot be entered
HOME_EXPANDED_VARS = HOME_PATH_VARS


@functools.cache
def jobctl_source() -> str:
    """The helper's code, ``jobctl_common.py`` first, without docstrings: it travels on
    the command line, where ``ps`` on the host shows it; a first comment line says what
    it is."""
    parts = [_without_docstring(name) for name in ("common.py", "stop.py", "program.py")]
    body = "\n".join(ln for part in parts for ln in part.splitlines() if ln.strip() != _FUTURE)
    return f"# distconsole job helper (console/hostprogs/jobctl/program.py)\n{_FUTURE}\n{body}\n"


_FUTURE = "from __future__ import annotations"


def _without_docstring(name: str) -> str:
    text = resources.files("console.hostprogs.jobctl").joinpath(name).read_text()
    if text.startswith('"""'):
        text = text[text.index('"""', 3) + 3 :].lstrip("\n")
    return text


def jobctl_command(host: Host, op: str, args: Mapping[str, Any] | None = None) -> str:
    """``python3 -u -c SOURCE OP JSON`` for ``host``, fully quoted.

    No setup line: the helper needs only the standard library, and the wrappers it
    starts run setup themselves. It keeps its stdin (the start payload; EOF tells
    ``watch`` the console went away), so its source travels as ``-c``.
    """
    words = [op]
    if args is not None:
        words.append(json.dumps(dict(args), separators=(",", ":")))
    program = HostProgram(jobctl.PROGRAM, jobctl_source(), tuple(words), stdin="")
    return shipment(host, program, setup=False).command


def process_name(launch: RankLaunch) -> str:
    return paths.process_name(launch.role, launch.index)


def process_names(plan: JobPlan) -> dict[tuple[str, str], RankLaunch]:
    """(host, name) -> launch; names are unique per host (they name the job's files)."""
    names: dict[tuple[str, str], RankLaunch] = {}
    for launch in plan.launches:
        key = (launch.host, process_name(launch))
        if key in names:
            raise JobError(
                f"plan {plan.job_id} starts two processes named {key[1]} on {key[0]}; "
                "every (role, index) must be unique per host"
            )
        names[key] = launch
    return names


@dataclass(frozen=True, slots=True)
class OwnOutput:
    """Where a wrapper sends its program's stdout and stderr (None: stderr joins stdout)."""

    stdout: str
    stderr: str | None


def own_output(launch: RankLaunch, job_dir: str) -> OwnOutput:
    """The process's own output files; ``rank`` files are written by the launcher itself."""
    own = [f for f in launch.log_paths if f.role != "rank"]
    combined = [f for f in own if f.stream == "combined"]
    if combined:
        return OwnOutput(combined[0].path, None)
    out = next((f.path for f in own if f.stream == "stdout"), None)
    err = next((f.path for f in own if f.stream == "stderr"), None)
    return OwnOutput(
        out or process_stdout(job_dir, launch.role, launch.index),
        err or process_stderr(job_dir, launch.role, launch.index),
    )


def host_job_dir(plan: JobPlan, host: str) -> str:
    try:
        return plan.job_dirs[host]
    except KeyError:
        raise JobError(f"plan {plan.job_id} has no job directory for {host}") from None


def _parent(path: str) -> str:
    head, _sep, _tail = path.rpartition("/")
    return head or "/"


def wrapper_script(host: Host, job_id: str, launch: RankLaunch, job_dir: str) -> str:
    """The bash script that runs one planned process and records how it ended."""
    name = process_name(launch)
    out = own_output(launch, job_dir)
    exit_path = paths.exit_file(job_dir, name)
    exit_file = shell_word(exit_path)
    exit_tmp = shell_word(paths.temporary(exit_path))
    # Appended: a process restarted in place (--max-restarts) goes on in the same files.
    redirect = f"exec >>{shell_word(out.stdout)} " + (
        "2>&1" if out.stderr is None else f"2>>{shell_word(out.stderr)}"
    )
    lines = [
        f"# distconsole job {job_id}: {name} on {host.name}",
        # The job's files private whatever the login umask (jobctl starts this with it).
        f"umask {PRIVATE_UMASK:04o}",
        redirect,
        # A TERM to the whole group reaches the program too; the trap only keeps this
        # shell alive long enough to record the program's status.
        "trap 'distconsole_signalled=1' TERM INT HUP",
        "distconsole_finish() {",
        # A second TERM (fail-fast, then a PS stop) must not kill the mv below half way:
        # no .exit file would say the process ended. Ignored here, ignored by mv too.
        "  trap '' TERM INT HUP",
        f"  umask {PRIVATE_UMASK:04o}",
        f'  printf "%s\\n" "$1" >{exit_tmp} && mv -f {exit_tmp} {exit_file}',
        '  exit "$1"',
        "}",
        f"export {JOB_ID_VAR}={shlex.quote(job_id)}",
        f"export {PROCESS_VAR}={shlex.quote(name)}",
        # 0, or the restart's number when the supervisor runs this again.
        f'export {RESTART_VAR}="${{{RESTART_VAR}:-0}}"',
    ]
    body = [f"cd -- {shell_word(launch.cwd)} || distconsole_finish {CWD_FAILED}"]
    for key, value in launch.env.items():
        problem = env_name_problem(key)
        if problem:
            raise JobError(f"{launch.host}: {name}: {problem}")
        # Paths the job itself reads (the hang hook, the flight recorder's dumps) get
        # their ~/ expanded by this shell: Python and PyTorch would take "~" literally.
        word = shell_word(value) if key in HOME_EXPANDED_VARS else shlex.quote(value)
        body.append(f"export {key}={word}")
    if CHECKPOINT_VAR in launch.env:
        body.append(f'mkdir -p -- "${CHECKPOINT_VAR}"')
    if HANG_HOOK_VAR in launch.env:
        # First on PYTHONPATH at run time, so the user's (--env, or set by the host's
        # setup line) still follows it.
        body.append(f'export PYTHONPATH="${HANG_HOOK_VAR}${{PYTHONPATH:+:$PYTHONPATH}}"')
    if not launch.argv:
        raise JobError(f"{launch.host}: {name}: the plan gives no command to run")
    body += [
        # The program gets the login umask back: what it writes is the user's affair.
        f'umask "${{{USER_UMASK_VAR}:-0022}}"; unset {USER_UMASK_VAR}',
        f"{shell_join(launch.argv)} </dev/null",
        "distconsole_finish $?",
        "",
    ]
    failed = shlex.quote("distconsole: the host setup line failed: " + (host.setup or ""))
    on_failure = (
        "distconsole_status=$?; "
        f'echo {failed} "(status $distconsole_status)" >&2; '
        f"distconsole_finish {SETUP_FAILED}"
    )
    lines.append(with_setup(host.setup, "\n".join(body), on_failure=on_failure))
    return "\n".join(lines)


@functools.cache
def bundled_file(resource: str, package: str = "console.examples") -> bytes:
    return resources.files(package).joinpath(resource).read_bytes()


JOB_FILE = "job.json"  # in every host's job directory: what a console needs to list it
JOB_FILE_VERSION = 1


def job_document(
    plan: JobPlan, *, created_at: float, spec: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``job.json``: the job's id, name, kind, spec, hosts, start time and whole plan,
    so that a console with an empty history (another machine) can list and describe
    the job from its hosts (console/jobs/report/discover.py reads it back)."""
    # Every host keeps one: the webhooks and the notify command only the leader's
    # supervisor config holds (jobs/ssh/supervision.py), masked here.
    return {
        "v": JOB_FILE_VERSION,
        "id": plan.job_id,
        "name": plan.name,
        "kind": plan.kind.value,
        "spec": masked_document(dict(spec)) if spec is not None else None,
        "hosts": list(plan_hosts(plan)),
        "rendezvous_host": plan.rendezvous_host,  # the leader's host, training nothing
        "created_at": created_at,
        "plan": masked_document(json.loads(plan_to_json(plan))),
    }


def start_payload(
    plan: JobPlan,
    host: Host,
    launches: Iterable[RankLaunch],
    *,
    created_at: float | None = None,
    spec: Mapping[str, Any] | None = None,
) -> str:
    """stdin for ``jobctl start`` on ``host``: uploads (the job's ``job.json`` among
    them), directories and wrappers."""
    job_dir = host_job_dir(plan, host.name)
    document = job_document(
        plan, created_at=time.time() if created_at is None else created_at, spec=spec
    )
    uploads = [
        {
            "path": upload.path,
            "data": base64.b64encode(
                upload.data.encode()
                if upload.data is not None
                else bundled_file(upload.resource, upload.package)
            ).decode(),
            "mode": 0o600,
        }
        for upload in plan.uploads
        if upload.host == host.name
    ]
    uploads.append(
        {
            "path": f"{job_dir}/{JOB_FILE}",
            "data": base64.b64encode(json.dumps(document).encode()).decode(),
            "mode": 0o600,
        }
    )
    dirs: set[str] = set()
    processes = []
    for launch in launches:
        out = own_output(launch, job_dir)
        dirs.add(_parent(out.stdout))
        if out.stderr is not None:
            dirs.add(_parent(out.stderr))
        processes.append(
            {
                "name": process_name(launch),
                "script": wrapper_script(host, plan.job_id, launch, job_dir),
            }
        )
    return json.dumps(
        {"job_dir": job_dir, "uploads": uploads, "dirs": sorted(dirs), "processes": processes}
    )


def own_log_files(launch: RankLaunch, job_dir: str) -> list[LogFile]:
    """The process's own output as LogFiles (the plan's, else the default .out/.err)."""
    own = [f for f in launch.log_paths if f.role != "rank"]
    if own:
        return own
    out = own_output(launch, job_dir)
    assert out.stderr is not None  # the defaults are always two files
    return [
        LogFile(out.stdout, "stdout", launch.role, index=launch.index),
        LogFile(out.stderr, "stderr", launch.role, index=launch.index),
    ]


def tail_command(paths: Iterable[str], lines: int = 15) -> str:
    """Last ``lines`` of each file (missing files are skipped quietly)."""
    parts = [f"tail -n {int(lines)} -- {shell_word(p)} 2>/dev/null | sed 's/^/  /'" for p in paths]
    return "; ".join(parts) if parts else "true"


def tail_paths(launch: RankLaunch, job_dir: str) -> list[str]:
    """Files that explain a failure: stderr (or combined output) of the process and ranks."""
    out = own_output(launch, job_dir)
    paths = [out.stderr if out.stderr is not None else out.stdout]
    paths += [f.path for f in launch.log_paths if f.role == "rank" and f.stream != "stdout"]
    return paths


def tail_paths_by_host(launch: RankLaunch, job_dir: str) -> dict[str, list[str]]:
    """``tail_paths`` grouped by the host that holds each file: the process's own output
    on its host, each rank's stderr on the host the rank ran on (``LogFile.host``: MPI and
    Horovod ranks write theirs there). Read with ``jobs/failure_tail.read_failure_tail``."""
    out = own_output(launch, job_dir)
    by_host = {launch.host: [out.stderr if out.stderr is not None else out.stdout]}
    for f in launch.log_paths:
        if f.role == "rank" and f.stream != "stdout":
            by_host.setdefault(f.host or launch.host, []).append(f.path)
    return by_host
