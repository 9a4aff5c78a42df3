"""What the job helper (``console/hostprogs/jobctl/program.py``) reports, as typed records.

Its output is JSON lines: the versioned hello first, then the operation's records.
:class:`JobctlReader` checks the hello and turns each later line into one of the
records below; :func:`one_shot` does the same for a finished run's whole stdout.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from console.errors import JobError
from console.hostprogs.jobctl import common as jobctl_common
from console.hostprogs.jobctl import program as jobctl
from console.transport.hello import check_hello


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class ProcessReport:
    """One process of the job on this host: running, ended (with or without a status),
    or never started (no process group recorded)."""

    name: str
    running: bool = False
    exit_status: int | None = None
    pgid: int | None = None
    missing: bool = False  # no pgid file: it never started
    gone: bool = False  # its group vanished without writing an exit status
    stop_requested: bool = False  # ended after someone asked for the job to stop
    ended_at: float | None = None  # the host's clock when it ended (its exit file's mtime)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ProcessReport:
        return cls(
            name=str(raw["proc"]),
            running=bool(raw.get("running")),
            exit_status=_int(raw.get("exit")),
            pgid=_int(raw.get("pgid")),
            missing=bool(raw.get("missing")),
            gone=bool(raw.get("gone")),
            stop_requested=bool(raw.get("stop_requested")),
            ended_at=float(raw["ended_at"])
            if isinstance(raw.get("ended_at"), int | float)
            else None,
        )


@dataclass(frozen=True, slots=True)
class SupervisedFailure:
    """The job's first failure as a supervisor recorded it (contract: supervisor.json)."""

    host: str
    process: str | None
    rank: int | None
    exit_code: int | None
    signal: str | None
    reason: str
    lines: tuple[str, ...]
    first_error: tuple[str, ...]
    at: float | None
    ranks: tuple[int, ...] = ()  # the process's ranks, or the one its launcher named

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SupervisedFailure:
        return cls(
            host=str(raw.get("host") or ""),
            process=str(raw["process"]) if raw.get("process") else None,
            rank=_int(raw.get("rank")),
            exit_code=_int(raw.get("exit_code")),
            signal=str(raw["signal"]) if raw.get("signal") else None,
            reason=str(raw.get("reason") or ""),
            lines=tuple(str(x) for x in raw.get("lines") or ()),
            first_error=tuple(str(x) for x in raw.get("first_error") or ()),
            at=_float(raw.get("at")),
            ranks=tuple(r for r in raw.get("ranks") or () if isinstance(r, int)),
        )


@dataclass(frozen=True, slots=True)
class SupervisorRecord:
    """A host's ``supervisor.json`` and whether its supervisor still runs."""

    host: str  # the host that wrote it
    leader: bool
    alive: bool
    state: str  # running, hung, succeeded, failed, stopped ("" before its first write)
    started_at: float | None
    ended_at: float | None
    heartbeat: float | None
    first_failure: SupervisedFailure | None
    hang: Mapping[str, Any] | None
    # name (the leader's own) or "host/name" -> {"host", "rank", "exit_code", "signal", "ended_at"}
    processes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # hosts whose supervisor ended while they live (the leader's note; a follower's: its leader)
    unsupervised: tuple[str, ...] = ()
    restarts: int = 0  # --max-restarts: the restarts the leader counted
    scale_downs: tuple[str, ...] = ()  # --min-hosts: the hosts the leader took out
    spare_hosts: tuple[str, ...] = ()  # --spare-hosts: planned, outside the job until joined
    joins: tuple[str, ...] = ()  # the spares that joined

    @property
    def final(self) -> bool:
        return self.state in jobctl_common.FINAL_STATES

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SupervisorRecord:
        failure = raw.get("first_failure")
        hang = raw.get("hang")
        return cls(
            host=str(raw.get("host") or ""),
            leader=bool(raw.get("leader")),
            alive=bool(raw.get("alive")),
            state=str(raw.get("state") or ""),
            started_at=_float(raw.get("started_at")),
            ended_at=_float(raw.get("ended_at")),
            heartbeat=_float(raw.get("heartbeat")),
            first_failure=SupervisedFailure.from_json(failure)
            if isinstance(failure, dict)
            else None,
            hang=hang if isinstance(hang, dict) else None,
            processes={
                str(k): v for k, v in (raw.get("processes") or {}).items() if isinstance(v, dict)
            },
            unsupervised=tuple(str(h) for h in raw.get("unsupervised") or ()),
            restarts=raw["restarts"] if isinstance(raw.get("restarts"), int) else 0,
            scale_downs=tuple(
                str(d.get("host")) for d in raw.get("scale_downs") or () if isinstance(d, dict)
            ),
            spare_hosts=tuple(str(h) for h in raw.get("spare_hosts") or ()),
            joins=tuple(str(j.get("host")) for j in raw.get("joins") or () if isinstance(j, dict)),
        )


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class Beat:
    """``watch`` is alive (and the channel too: writing it would fail otherwise)."""

    time: float


@dataclass(frozen=True, slots=True)
class WatchDone:
    """``watch`` saw every process end."""


@dataclass(frozen=True, slots=True)
class Started:
    pgids: Mapping[str, int]
    job_dir: str
    supervisor_pid: int | None = None
    supervisor_port: int | None = None  # the leader's, where the followers connect
    supervisor_error: str = ""


@dataclass(frozen=True, slots=True)
class Inspected:
    processes: tuple[ProcessReport, ...]
    marked: int  # processes that carry the job's id in their environment
    supervisor: SupervisorRecord | None = None  # None: no supervisor was started there


@dataclass(frozen=True, slots=True)
class LeftProcess:
    pid: int
    command: str


@dataclass(frozen=True, slots=True)
class Stopped:
    remaining: tuple[LeftProcess, ...]
    killed: int
    processes: tuple[ProcessReport, ...]  # exit_status None: it left no status


@dataclass(frozen=True, slots=True)
class FreePort:
    port: int


WatchRecord = ProcessReport | SupervisorRecord | Beat | WatchDone


def watch_record(raw: Mapping[str, Any]) -> WatchRecord:
    if "proc" in raw:
        return ProcessReport.from_json(raw)
    if isinstance(raw.get("supervisor"), dict):
        return SupervisorRecord.from_json(raw["supervisor"])
    if raw.get("done"):
        return WatchDone()
    if "beat" in raw:
        return Beat(float(raw["beat"]))
    raise ValueError(f"not a watch record: {raw!r:.200}")


def started(raw: Mapping[str, Any]) -> Started:
    pgids = {str(k): int(v) for k, v in (raw.get("pgids") or {}).items()}
    sup = raw.get("supervisor") or {}
    return Started(
        pgids,
        str(raw.get("job_dir", "")),
        _int(sup.get("pid")),
        _int(sup.get("port")),
        str(sup.get("error") or ""),
    )


def inspected(raw: Mapping[str, Any]) -> Inspected:
    procs = tuple(ProcessReport.from_json(p) for p in raw.get("processes") or ())
    sup = raw.get("supervisor")
    record = SupervisorRecord.from_json(sup) if isinstance(sup, dict) else None
    return Inspected(procs, int(raw.get("marked") or 0), record)


def stopped(raw: Mapping[str, Any]) -> Stopped:
    left = tuple(LeftProcess(int(p["pid"]), str(p["cmd"])) for p in raw.get("remaining") or ())
    procs = tuple(ProcessReport.from_json(p) for p in raw.get("processes") or ())
    return Stopped(left, int(raw.get("killed") or 0), procs)


def free_port(raw: Mapping[str, Any]) -> FreePort:
    return FreePort(int(raw["port"]))


class JobctlReader:
    """One helper run's stdout lines: the hello (checked), then JSON records.

    ``read`` returns None for the hello and for lines that are not JSON objects (a
    Python warning on stderr-turned-stdout, say)."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.greeted = False

    def read(self, line: str) -> dict[str, Any] | None:
        if not line.startswith("{"):
            return None
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise JobError(f"{self.host}: job helper wrote a broken line: {line[:200]!r}") from exc
        if not self.greeted:
            check_hello(self.host, jobctl.PROGRAM, jobctl.VERSION, raw)
            self.greeted = True
            return None
        if not isinstance(raw, dict):
            raise JobError(f"{self.host}: job helper wrote a non-object: {line[:200]!r}")
        return raw


def one_shot(host: str, op: str, stdout: str) -> dict[str, Any]:
    """The last record of a finished helper run (after its hello)."""
    reader = JobctlReader(host)
    last = None
    for line in stdout.splitlines():
        record = reader.read(line)
        if record is not None:
            last = record
    if last is None:
        raise JobError(f"{host}: job helper '{op}' printed no result: {stdout[-300:]!r}")
    return last
