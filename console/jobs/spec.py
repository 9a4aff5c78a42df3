"""What the user asked for: a validated, immutable :class:`JobSpec`.

The launch form and the CLI both build a spec with :func:`make_spec`; every problem is
a :class:`JobSpecError` whose ``field`` is the spec field name (the form field). The CLI
turns that name into its option (``gpus_per_host`` -> ``--gpus-per-host``) with
:data:`CLI_OPTION`. Checks that need the inventory (host names, tags, slot counts) are
the planner's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from console.errors import JobSpecError
from console.jobs.models import JobKind
from console.jobs.notify import NOTIFY_DEFAULT_ON, NotifyChecks
from console.jobs.plan.netpresets import NetPreset
from console.jobs.spec_env import parse_env as parse_env
from console.jobs.spec_fields import EXAMPLE_PREFIX, FieldChecks
from console.jobs.spec_options import (
    DEFAULT_HANG_TIMEOUT,
    RAY_FIELDS,
    FieldProblem,
    HangChecks,
    NetChecks,
    RayChecks,
    RestartChecks,
    SyncChecks,
)
from console.jobs.spec_recovery import HOROVOD_ELASTIC_VAR as HOROVOD_ELASTIC_VAR
from console.jobs.spec_recovery import RecoveryRules
from console.names import path_stem
from console.validation import first_problem

PLACEHOLDERS = ("{steps_per_rank}", "{total_steps}", "{world_size}")

# spec field -> CLI option that sets it (for messages on the command line)
CLI_OPTION: dict[str, str] = {
    "kind": "--kind",
    "hosts": "--hosts",
    "tags": "--tag",
    "gpus_per_host": "--gpus-per-host",
    "program": "PROGRAM",
    "args": "ARGS",
    "workdir": "--workdir",
    "env": "--env",
    "interface": "--interface",
    "master_port": "--master-port",
    "total_steps": "--total-steps",
    "ps": "--ps",
    "workers": "--workers",
    "chief": "--chief",
    "name": "--name",
    "fail_fast": "--no-fail-fast",
    "horovod_launcher": "--horovod-launcher",
    "net": "--net",
    "ib_hca": "--ib-hca",
    "hang_timeout": "--hang-timeout",
    "stop_on_hang": "--stop-on-hang",
    "sync": "--sync",
    "sync_max_size": "--sync-max-size",
    "sync_max_file": "--sync-max-file",
    "ray_object_store": "--ray-object-store",
    "ray_dashboard_host": "--ray-dashboard-host",
    "ray_dashboard_port": "--ray-dashboard-port",
    "notify": "--notify",
    "notify_command": "--notify-command",
    "notify_on": "--notify-on",
    "max_restarts": "--max-restarts",
    "checkpoint_dir": "--checkpoint-dir",
    "min_hosts": "--min-hosts",
    "spare_hosts": "--spare-hosts",
    "horovod_elastic": "--horovod-elastic",
    "rendezvous_host": "--rendezvous-host",
    "slow_threshold": "--slow-threshold",
    "exclude_slow": "--exclude-slow",
}


class JobSpec(
    FieldChecks,
    NetChecks,
    SyncChecks,
    RayChecks,
    HangChecks,
    NotifyChecks,
    RestartChecks,
    RecoveryRules,
    BaseModel,
):
    """One job as the user described it (before it is placed on hosts)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: JobKind
    program: str
    args: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()  # host names, in rank order; empty: all (after tags)
    tags: tuple[str, ...] = ()  # keep hosts having any of these tags
    gpus_per_host: int | None = None  # None: host.gpus when a number, else 1
    workdir: str | None = None  # None: each host's work_dir
    env: dict[str, str] = Field(default_factory=dict)
    interface: str | None = None  # None: each host's interface
    master_port: int | None = None  # None: the runner picks a free one
    total_steps: int | None = None
    ps: int | None = None  # ps kind: number of ps tasks (default 1)
    workers: int | None = None  # ps kind: number of workers (default: one per host)
    chief: bool = False
    name: str | None = None  # None: derived from kind and program
    fail_fast: bool = True
    horovod_launcher: Literal["gloo", "mpi"] = "gloo"
    net: NetPreset = "auto"  # network preset (console/jobs/plan/netpresets.py)
    ib_hca: str | None = None  # NCCL_IB_HCA for --net ib/roce, e.g. mlx5_0,mlx5_1

    # Seconds without progress (no log line, no step) while processes live -> hung;
    # None: hang detection off.
    hang_timeout: float | None = DEFAULT_HANG_TIMEOUT
    stop_on_hang: bool = False  # a hung job is stopped (failed, cause "hung") after capture
    sync: str | None = None  # a local directory put on every host (console/jobs/sync_*.py)
    sync_max_size: int | None = None  # bytes; None: sync_tree.DEFAULT_MAX_TOTAL
    sync_max_file: int | None = None  # bytes; None: sync_tree.DEFAULT_MAX_FILE
    # ray kind (console/jobs/plan/ray.py): each node's object store (bytes; None: Ray's
    # default share of memory), where the head's dashboard listens (None: 127.0.0.1 and
    # the master port + 1).
    ray_object_store: int | None = None
    ray_dashboard_host: str | None = None
    ray_dashboard_port: int | None = None
    # Telling a person (console/jobs/notify.py): webhooks, a command on the leader host,
    # and the events that reach them.
    notify: tuple[str, ...] = ()
    notify_command: str | None = None
    notify_on: tuple[str, ...] = NOTIFY_DEFAULT_ON
    # Recovery (console/hostprogs/supervisor/restart.py): restarts per kind's own way
    # (None: the leader host's max_restarts in hosts.yaml, else 0), and where every
    # process checkpoints (None: a directory of the job on each host).
    max_restarts: int | None = None
    checkpoint_dir: str | None = None
    # Elastic membership (ddp): the job goes on while at least this many hosts remain
    # (torchrun --nnodes M:N); None: the leader host's min_hosts in hosts.yaml, else off.
    min_hosts: int | None = None
    # ddp elastic: hosts whose torchrun agent waits to replace a lost host (scale up).
    spare_hosts: tuple[str, ...] = ()
    # The program uses hvd.elastic: horovod restarts through Horovod elastic
    # (console/jobs/plan/horovod_elastic.py) instead of re-running horovodrun whole.
    horovod_elastic: bool = False
    # A host that trains nothing and holds the rendezvous and the leader supervisor, so
    # any training host may be lost (issue 31); None: the leader host's rendezvous_host
    # in hosts.yaml, else the first host holds them.
    rendezvous_host: str | None = None
    # A rank this many times busier than the median rank for 2 windows is slow
    # (console/hostprogs/pace/score.py); None: its default, 1.3.
    slow_threshold: float | None = None
    # Elastic ddp: a host whose rank is slow this many minutes is drained (a scale-down).
    exclude_slow: float | None = None

    @model_validator(mode="after")
    def _per_kind(self) -> JobSpec:
        if self.workdir is not None and not _host_absolute(self.workdir) and self.sync is None:
            raise FieldProblem(
                "workdir",
                f"must be an absolute path or start with ~/, got {self.workdir!r} "
                "(a relative one means inside --sync DIR)",
            )
        if self.kind is not JobKind.PS:
            for field in ("ps", "workers"):
                if getattr(self, field) is not None:
                    raise FieldProblem(field, "only applies to --kind ps")
            if self.chief:
                raise FieldProblem("chief", "only applies to --kind ps")
        else:
            if self.ps is not None and self.ps < 1:
                raise FieldProblem("ps", "a ps job needs at least one ps task")
            if self.workers is not None and self.workers < 1:
                raise FieldProblem("workers", "a ps job needs at least one worker")
        if self.kind is not JobKind.RAY:
            for field in RAY_FIELDS:
                if getattr(self, field) is not None:
                    raise FieldProblem(field, "only applies to --kind ray")
        if self.horovod_launcher != "gloo" and self.kind is not JobKind.HOROVOD:
            raise FieldProblem("horovod_launcher", "only applies to --kind horovod")
        if self.total_steps is None:
            for arg in self.args:
                for token in ("{steps_per_rank}", "{total_steps}"):
                    if token in arg:
                        raise FieldProblem(
                            "total_steps", f"the arguments use {token}; set the total steps"
                        )
        return self

    @model_validator(mode="after")
    def _hang(self) -> JobSpec:
        if self.stop_on_hang and self.hang_timeout is None:
            raise FieldProblem("stop_on_hang", "needs hang detection (a hang timeout above 0)")
        return self

    @property
    def display_name(self) -> str:
        """The name, or one derived from kind and program (``ddp-train``)."""
        if self.name:
            return self.name
        if self.program.startswith(EXAMPLE_PREFIX):
            stem = "example-" + self.program[len(EXAMPLE_PREFIX) :]
        else:
            base = self.program.rstrip("/").rsplit("/", 1)[-1]
            stem = base.removesuffix(".py") or "job"
        stem = path_stem(stem, limit=64)
        return f"{self.kind.value}-{stem}"[:64]

    @property
    def example(self) -> str | None:
        """``ddp`` for ``example:ddp``; None for a user program."""
        if self.program.startswith(EXAMPLE_PREFIX):
            return self.program[len(EXAMPLE_PREFIX) :]
        return None


def _host_absolute(path: str) -> bool:
    return path.startswith("/") or path == "~" or path.startswith("~/")


# Wording for the spec's own fields; everything else reads as in console/validation.py.
_WORDING = {
    ("kind", "enum"): "must be one of: " + ", ".join(k.value for k in JobKind),
    ("horovod_launcher", "literal_error"): "must be gloo or mpi",
    ("net", "literal_error"): "must be one of: auto, tcp, ib, roce",
}


def _spec_error(exc: ValidationError) -> JobSpecError:
    inner = (exc.errors()[0].get("ctx") or {}).get("error")
    if isinstance(inner, FieldProblem):
        return JobSpecError(inner.field, inner.message)
    problem = first_problem(
        exc,
        known_keys=JobSpec.model_fields,
        unknown_key="is not a job spec field",
        overrides=_WORDING,
    )
    return JobSpecError(str(problem.key) if problem.loc else "spec", problem.message)


def make_spec(**fields: Any) -> JobSpec:
    """Build a spec from form/CLI values (strings are converted); raises JobSpecError."""
    try:
        return JobSpec.model_validate(fields)
    except ValidationError as exc:
        raise _spec_error(exc) from None


def spec_with(spec: JobSpec, **changes: Any) -> JobSpec:
    """A copy with some fields changed, validated again (the runner sets master_port)."""
    data: Mapping[str, Any] = spec.model_dump()
    return make_spec(**{**data, **changes})
