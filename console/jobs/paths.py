"""Where a job's files live on each host, and how to hand paths with ``~/`` to a shell.

Layout of one job directory (``<work_dir>/.distconsole/jobs/<job-id>/``)::

    <role>-<index>.out / .err   stdout / stderr of each launched process
    example_<name>.py           a bundled example program, when the job uses one
    ranks/                      per-rank output written by mpirun / horovodrun
    torchrun/                   torchrun's own per-worker files

Paths keep a leading ``~/`` literally (the console does not know remote homes); use
:func:`shell_word` / :func:`shell_join` to put them on a remote command line so that
the remote shell expands ``~`` while everything else stays quoted.
"""

from __future__ import annotations

import secrets
import shlex
import time
from collections.abc import Iterable

from console.jobs.models import JOBS_SUBDIR
from console.names import path_stem


def new_job_id(name: str, now: float | None = None) -> str:
    """``<name>-<UTC yyyymmdd-HHMMSS>-<6 hex>``: sortable by start time, unique, path-safe."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    stem = path_stem(name)
    return f"{stem}-{stamp}-{secrets.token_hex(3)}"


def job_dir(work_dir: str, job_id: str) -> str:
    """The job's directory on a host whose work directory is ``work_dir``."""
    base = work_dir.rstrip("/") or "/"
    if base == "/":
        return f"/{JOBS_SUBDIR}/{job_id}"
    return f"{base}/{JOBS_SUBDIR}/{job_id}"


def process_stdout(job_dir_path: str, role: str, index: int) -> str:
    return f"{job_dir_path}/{role}-{index}.out"


def process_stderr(job_dir_path: str, role: str, index: int) -> str:
    return f"{job_dir_path}/{role}-{index}.err"


def ranks_dir(job_dir_path: str) -> str:
    """Where mpirun/horovodrun write per-rank output (``--output-filename``)."""
    return f"{job_dir_path}/ranks"


def torchrun_log_dir(job_dir_path: str) -> str:
    return f"{job_dir_path}/torchrun"


def example_path(job_dir_path: str, example: str) -> str:
    return f"{job_dir_path}/example_{example}.py"


def example_resource(example: str) -> str:
    """Name of the bundled file in the ``console.examples`` package."""
    return f"{example}_train.py"


def shell_word(word: str) -> str:
    """Quote one word for a POSIX shell, leaving a leading ``~/`` for the shell to expand.

    ``~/a b`` -> ``"$HOME"/'a b'``; anything else is :func:`shlex.quote`.
    """
    if word == "~":
        return '"$HOME"'
    if word.startswith("~/"):
        rest = word[2:]
        return '"$HOME"/' + shlex.quote(rest) if rest else '"$HOME"/'
    return shlex.quote(word)


def shell_join(argv: Iterable[str]) -> str:
    """Like :func:`shlex.join`, with :func:`shell_word`'s ``~/`` expansion."""
    return " ".join(shell_word(w) for w in argv)
