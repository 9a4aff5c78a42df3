"""Plain data shared by planners, the runner, the log follower and the UI.

A plan says, for every process to start, where it runs, its exact argv and
environment, and which log files it writes (with their rank attribution), so that
everything downstream can work from the plan alone.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Literal

JOBS_SUBDIR = ".distconsole/jobs"  # under each host's work_dir


class JobKind(enum.StrEnum):
    DDP = "ddp"
    MPI = "mpi"
    HOROVOD = "horovod"
    PS = "ps"
    RAY = "ray"  # a Ray cluster of SSH processes and a driver on its head (plan_ray.py)


class JobState(enum.StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    LOST = "lost"
    # Its processes run on but no supervisor watches them (the supervisor died): nothing
    # stops the rest when one fails; the console derives it, no supervisor writes it.
    UNSUPERVISED = "unsupervised"

    @property
    def finished(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED)


Stream = Literal["stdout", "stderr", "combined"]


@dataclass(frozen=True, slots=True)
class LogFile:
    """One log file a launched process writes on its host.

    ``rank``/``local_rank`` are set when the file belongs to one rank; a launcher's
    combined output (mpirun --tag-output, torchrun prefixes) has ``rank=None`` and the
    log parser attributes each line from its prefix.
    """

    path: str  # on the host; may start with "~/" (expanded remotely as $HOME)
    stream: Stream
    role: str  # "rank", "launcher", "ps", "worker", "chief"
    rank: int | None = None
    local_rank: int | None = None
    index: int | None = None  # task index for ps/worker/chief
    # The host the file is written on; None: the launching process's host. MPI and
    # Horovod ranks write theirs on the host they run on, not the launcher's.
    host: str | None = None
    # The machine whose process writes the file when ``host`` reads it over a shared
    # filesystem (a Slurm task's node): its lines name this node instead of ``host``.
    node: str | None = None


@dataclass(frozen=True, slots=True)
class RankLaunch:
    """One process the runner starts on one host."""

    host: str
    role: str  # "torchrun", "launcher", "ps", "worker", "chief", "rank"
    index: int
    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: str
    log_paths: tuple[LogFile, ...]
    ranks: tuple[int, ...] = ()  # global ranks this process hosts (torchrun: its node's ranks)


@dataclass(frozen=True, slots=True)
class Upload:
    """A bundled file the runner copies to a host before starting the job."""

    host: str
    path: str  # destination on the host (may start with "~/")
    resource: str  # file name inside ``package``
    package: str = "console.examples"  # console.hostprogs for the job's sitecustomize hook
    # The file's text when it is the job's own, not a bundled file (the environment
    # horovodrun --gloo must not see: jobs/plan/mpi_secrets.py); written 0600.
    data: str | None = None


@dataclass(frozen=True, slots=True)
class Notify:
    """Where the leader's supervisor tells a person about the job (jobs/notify.py)."""

    urls: tuple[str, ...] = ()  # webhooks (secrets: shown masked)
    command: str | None = None  # run on the leader host with DISTCONSOLE_* variables
    on: tuple[str, ...] = ()  # events: failed, hung, succeeded, stopped, ...


@dataclass(frozen=True, slots=True)
class JobPlan:
    job_id: str
    name: str
    kind: JobKind
    world_size: int
    launches: tuple[RankLaunch, ...]
    job_dirs: dict[str, str]  # host name -> job directory on that host
    master_addr: str | None = None
    master_port: int | None = None
    total_steps: int | None = None
    steps_per_rank: int | None = None
    steps_dropped: int | None = None  # total_steps - steps_per_rank * world_size
    hosts_involved: tuple[str, ...] = ()  # every host a rank runs on (mpi: not only the launcher's)
    warnings: tuple[str, ...] = field(default_factory=tuple)
    uploads: tuple[Upload, ...] = ()  # example programs to copy before launching
    fail_fast: bool = True  # one non-zero exit fails the job and stops the rest
    # Hang detection by the host supervisors (from the spec; None: off).
    hang_timeout: float | None = None
    stop_on_hang: bool = False
    notify: Notify | None = None
    # Restarts through the kind's own mechanism (--max-restarts; 0: none).
    max_restarts: int = 0
    # ddp's elastic floor (--min-hosts; 0: not elastic): torchrun --nnodes M:N, and the
    # supervisors take a lost host as a scale-down while M hosts remain.
    min_hosts: int = 0
    # Facts worth a line in `plan`/`launch` that are no problem (the --net preset's env).
    notes: tuple[str, ...] = ()
    # --rendezvous-host: trains nothing, holds the rendezvous and the leader supervisor
    # (its launch, if any, is launches[0]); not in hosts_involved.
    rendezvous_host: str | None = None
    # --slow-threshold: a rank this many times busier than the median is slow (None: 1.3).
    slow_threshold: float | None = None
    # --exclude-slow: minutes a follower's rank may stay slow before its host is drained.
    exclude_slow: float | None = None
