"""Where a job's files live on each host, and how to hand paths with ``~/`` to a shell.

Layout of one job directory (``<work_dir>/.distconsole/jobs/<job-id>/``), where a
process's NAME is ``<role>-<index>``::

    NAME.out / NAME.err         stdout / stderr of each launched process
    NAME.sh                     its wrapper script (runs setup, records the exit status)
    NAME.pgid / NAME.machine    its process group, and the boot id of the machine that ran it
    NAME.exit                   its exit status, written when it ends (atomically, via .tmp)
    example_<name>.py           a bundled example program, when the job uses one
    ranks/                      per-rank output written by mpirun / horovodrun
    torchrun/                   torchrun's own per-worker files

Paths keep a leading ``~/`` literally (the console does not know remote homes); use
:func:`shell_word` / :func:`shell_join` to put them on a remote command line so that
the remote shell expands ``~`` while everything else stays quoted.
"""

from __future__ import annotations

import secrets
import time

from console.hostprogs.jobctl.common import SUPERVISOR_STATE, supervisor_file
from console.jobs.models import JOBS_SUBDIR
from console.names import path_stem
from console.transport.ship import shell_join as shell_join  # re-exported: paths' quoting
from console.transport.ship import shell_word as shell_word


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


# Suffixes after a process's name; console/hostprogs/jobctl/common.py (which cannot import
# this module on a host) spells the same ones, and a contract test keeps them equal.
STDOUT_SUFFIX = ".out"
STDERR_SUFFIX = ".err"
WRAPPER_SUFFIX = ".sh"
PGID_SUFFIX = ".pgid"
MACHINE_SUFFIX = ".machine"
EXIT_SUFFIX = ".exit"
TMP_SUFFIX = ".tmp"
# Written in the job directory by whoever stops the job, before any signal: a process
# that then dies of SIGTERM was stopped on request, not a failure (another console
# watching the job reads it so).
STOP_REQUESTED = "stop-requested"


def process_name(role: str, index: int) -> str:
    """A launched process's name: unique per host, the stem of its files."""
    return f"{role}-{index}"


def process_stdout(job_dir_path: str, role: str, index: int) -> str:
    return f"{job_dir_path}/{process_name(role, index)}{STDOUT_SUFFIX}"


def process_stderr(job_dir_path: str, role: str, index: int) -> str:
    return f"{job_dir_path}/{process_name(role, index)}{STDERR_SUFFIX}"


def exit_file(job_dir_path: str, name: str) -> str:
    """Where the process named ``name`` records its exit status; present = it ended."""
    return f"{job_dir_path}/{name}{EXIT_SUFFIX}"


def temporary(path: str) -> str:
    """The name a file is written under before its atomic rename to ``path``."""
    return path + TMP_SUFFIX


def ranks_dir(job_dir_path: str) -> str:
    """Where MPI/Horovod ranks write their output, on each rank's own host."""
    return f"{job_dir_path}/ranks"


def rank_dir(job_dir_path: str, rank: int | str) -> str:
    """One MPI/Horovod rank's output, on the host it runs on (``jobs/plan/mpi_ranks.py``)."""
    return f"{ranks_dir(job_dir_path)}/rank.{rank}"


def supervisor_states(job_dir_path: str, host: str) -> tuple[str, ...]:
    """Where ``host``'s supervisor may record its state: the leader's plain name or a
    follower's with the host in it (``hostprogs/jobctl/common.py`` ``supervisor_file``);
    the record's ``host`` says whose it is when hosts share the directory."""
    return (
        f"{job_dir_path}/{SUPERVISOR_STATE}",
        f"{job_dir_path}/{supervisor_file(SUPERVISOR_STATE, host, leader=False)}",
    )


RANK_DONE = "done"  # in a rank_dir: written once the rank's stdout is closed


def rank_done(job_dir_path: str, rank: int | str) -> str:
    return f"{rank_dir(job_dir_path, rank)}/{RANK_DONE}"


# Hang detection (console/hostprogs/supervisor/hang_capture.py spells the same names; a contract
# test keeps them equal): captures, the hook's stack files and the flight recorder's
# dumps in hang/, the job's sitecustomize in python/, GPU samples beside the logs.
HANG_DIR = "hang"
HANG_HOOK_DIR = "python"
GPU_SAMPLES = "gpu-samples.jsonl"
FLIGHT_RECORDER_PREFIX = "nccl_trace_rank_"


def hang_dir(job_dir_path: str) -> str:
    return f"{job_dir_path}/{HANG_DIR}"


def hang_hook_dir(job_dir_path: str) -> str:
    """The folder put first on every rank's PYTHONPATH: it holds the job's sitecustomize."""
    return f"{job_dir_path}/{HANG_HOOK_DIR}"


def flight_recorder_prefix(job_dir_path: str) -> str:
    """TORCH_FR_DUMP_TEMP_FILE: PyTorch appends the rank to it."""
    return f"{hang_dir(job_dir_path)}/{FLIGHT_RECORDER_PREFIX}"


def checkpoint_dir(job_dir_path: str) -> str:
    return f"{job_dir_path}/checkpoints"


def torchrun_log_dir(job_dir_path: str) -> str:
    return f"{job_dir_path}/torchrun"


def example_path(job_dir_path: str, example: str) -> str:
    return f"{job_dir_path}/example_{example}.py"


def example_resource(example: str) -> str:
    """Name of the bundled file in the ``console.examples`` package."""
    return f"{example}_train.py"
