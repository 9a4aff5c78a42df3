"""A job's policy: what the ends of its processes mean, as a pure state machine.

Fed typed reports (a process ended, a host went silent, a hang was seen), it decides the
job's verdict (succeeded, failed, stopped) and when every process of the job must be
stopped: fail-fast (one non-zero exit or a silent host stops the rest), the PS rule
(parameter servers are stopped once every worker and the chief succeeded), and a stop
someone asked for (the job ends stopped, not failed), and restarts: a failed process the
job restarts in place (``--max-restarts``: MPI's launcher, a PS worker) is not an end
(``restart``), and restarts done by an engine itself (torchrun's) are counted
(``note_restart``); with ``min_hosts`` (elastic membership: ddp's, Horovod elastic's,
whose hosts but the launcher's are ``member_hosts``) a lost host is a scale-down while
that many hosts remain, not a failure; ``spare_hosts`` (ddp ``--spare-hosts``) wait
outside the job until one joins (``spare_joined``): a waiting spare's end is never a
failure, and the job is decided without waiting for it (the stop it orders ends it).
A rendezvous host's store (role ``rendezvous``) trains nothing and is not waited for;
its end before the stop, or its host's loss, fails the job naming it.
It does no I/O and knows no backend: the host supervisor (``supervisor.py``, which this
file is a part of on a host) and the console (``console/jobs/ssh/watch.py``, for a job
no supervisor watches) feed it.

Standard library only and Python >= 3.7: this file is concatenated into the supervisor's
source and sent to hosts (no ``X | Y`` at runtime, no walrus, no slots).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

if __name__ != "__main__":  # imported by the console/tests; on a host the parts precede
    from console.hostprogs.failure_lines import followed_another

# How long after a failure that followed another's (a rank that lost its peer) a plain
# failure reported later is still taken as the cause: the host whose rank crashed can
# end after its peer's host, which noticed the lost peer first.
POLICY_CAUSE_WINDOW_S = 10.0
POLICY_PS_FINISHERS = ("worker", "chief")  # roles whose success ends a ps job
SUCCEEDED = "succeeded"
FAILED = "failed"
STOPPED = "stopped"
# Per kind, the roles a host's supervisor restarts in place when they fail (ddp: none,
# torchrun restarts its own workers; see JobPolicy.restart).
POLICY_RESTARTED_ROLES = {"mpi": ("launcher",), "horovod": ("launcher",), "ps": ("worker",)}
POLICY_RENDEZVOUS_ROLE = "rendezvous"  # the store on a rendezvous host (jobs/plan/rendezvous.py)


@dataclass(frozen=True)
class PolicyProcess:
    """One process of the job, as planned."""

    host: str
    name: str
    role: str
    ranks: tuple[int, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.host, self.name)

    @property
    def rank(self) -> int | None:
        return self.ranks[0] if self.ranks else None


@dataclass(frozen=True)
class ProcessEnded:
    """A process ended: its exit status (None: it vanished without one), the signal
    that ended it when the status says so, the host's clock when it ended, and whether
    it ended after someone asked for the job to stop."""

    host: str
    name: str
    exit_code: int | None
    at: float
    signal: str | None = None
    stop_requested: bool = False
    lines: tuple[str, ...] = ()  # the cause, from its output
    rank: int | None = None  # the rank its launcher's report names as the first failed


@dataclass(frozen=True)
class HostSilent:
    """A host's supervisor stopped answering (missed heartbeats, a lost connection)."""

    host: str
    reason: str
    at: float


@dataclass(frozen=True)
class StopAsked:
    """Someone (``distconsole stop``, another console) asked for the job to stop."""

    host: str
    at: float


@dataclass(frozen=True)
class HangSeen:
    """No process of the job made progress for ``idle_s`` seconds while alive."""

    at: float
    idle_s: float
    stop: bool  # the job's stop_on_hang


@dataclass
class Failure:
    """The job's first failure: who, how, and the lines that say why."""

    host: str
    process: str | None
    rank: int | None
    exit_code: int | None
    signal: str | None
    reason: str
    at: float
    lines: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()  # the process's ranks, or the one its launcher named

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "process": self.process,
            "rank": self.rank,
            "ranks": list(self.ranks),
            "exit_code": self.exit_code,
            "signal": self.signal,
            "reason": self.reason,
            "lines": list(self.lines),
            "at": self.at,
        }


@dataclass
class JobPolicy:
    """The verdict of one job from the reports fed so far (see the module doc).

    ``feed`` returns True exactly once: when every remaining process of the job must be
    stopped now. ``verdict`` is the final state once decided; the job is over when a
    verdict is set and every process has ended (``over``)."""

    processes: list[PolicyProcess]
    kind: str
    fail_fast: bool = True
    verdict: str | None = None
    first_failure: Failure | None = None
    # The first process failure after a host loss was taken as the cause: what followed it.
    then_failure: Failure | None = None
    hung: bool = False
    stop_ordered_at: float | None = None
    ended: dict[tuple[str, str], ProcessEnded] = field(default_factory=dict)
    max_restarts: int = 0  # per process restarted in place; ddp: torchrun's, per agent
    restarts: dict[tuple[str, str], int] = field(default_factory=dict)  # process -> done
    min_hosts: int = 0  # elastic (ddp --min-hosts): a lost host above it is a scale-down
    master_host: str = ""  # the host whose loss is always fatal (the rendezvous)
    scale_downs: list[dict[str, Any]] = field(default_factory=list)  # host, cause, at, ...
    spare_hosts: list[str] = field(default_factory=list)  # ddp --spare-hosts, in plan order
    joins: list[dict[str, Any]] = field(default_factory=list)  # spares that joined: host, at
    # The job's hosts where its processes do not name them (Horovod elastic: one launcher).
    member_hosts: list[str] = field(default_factory=list)
    rendezvous_host: str = ""  # --rendezvous-host: its loss is always fatal, named so

    def restart(self, report: ProcessEnded) -> int:
        """0: feed ``report`` as an end. N > 0: the process failed, may be restarted in
        place (its kind's role, restarts left, nothing stopping the job) and this is its
        N-th restart: the caller restarts it and feeds no end."""
        proc = self.process(report.host, report.name)
        if proc is None or proc.key in self.ended or report.exit_code == 0:
            return 0
        if report.stop_requested or self.verdict is not None or self.stop_ordered_at is not None:
            return 0
        if proc.role not in POLICY_RESTARTED_ROLES.get(self.kind, ()):
            return 0
        done = self.restarts.get(proc.key, 0)
        if done >= self.max_restarts:
            return 0
        self.restarts[proc.key] = done + 1
        return done + 1

    def note_restart(self, host: str, name: str, count: int) -> bool:
        """A restart done elsewhere (another host's supervisor, torchrun's agent): its
        process's count is at least ``count``. True when that is news."""
        key = (host, name)
        if self.restarts.get(key, 0) >= count:
            return False
        self.restarts[key] = count
        return True

    @property
    def restart_count(self) -> int:
        """The job's restarts: torchrun restarts every host's workers together (the most
        any agent made); a process restarted in place counts its own."""
        counts = list(self.restarts.values())
        if not counts:
            return 0
        return max(counts) if self.kind == "ddp" else sum(counts)

    @property
    def hosts(self) -> list[str]:
        """The job's hosts, in plan order (not its spares)."""
        found: list[str] = list(self.member_hosts)
        for proc in self.processes:
            if self.member_hosts and proc.role == "horovodrun":
                continue  # Horovod's driver: on a rendezvous host it trains nothing
            trains = proc.role != POLICY_RENDEZVOUS_ROLE  # the rendezvous host does not
            if trains and proc.host not in found and proc.host not in self.spare_hosts:
                found.append(proc.host)
        return found

    @property
    def joined(self) -> list[str]:
        return [str(j["host"]) for j in self.joins]

    @property
    def hosts_now(self) -> list[str]:
        """The hosts in the job now: its hosts and the spares that joined, but those a
        scale-down took out."""
        gone = {str(down["host"]) for down in self.scale_downs}
        return [h for h in (*self.hosts, *self.joined) if h not in gone]

    def waiting_spare(self, host: str) -> bool:
        """A spare host that has not joined the job (its agent waits, or ended waiting)."""
        return host in self.spare_hosts and host not in self.joined

    def spare_joined(self, host: str, at: float) -> bool:
        """A spare's agent joined a round (its workers run). True when that is news."""
        if not self.waiting_spare(host) or self.verdict is not None:
            return False
        self.joins.append({"host": host, "at": at})
        self.joins[-1]["hosts_now"] = list(self.hosts_now)
        return True

    def process(self, host: str, name: str) -> PolicyProcess | None:
        for proc in self.processes:
            if proc.host == host and proc.name == name:
                return proc
        return None

    @property
    def all_ended(self) -> bool:
        return all(p.key in self.ended for p in self.processes)

    @property
    def job_ended(self) -> bool:
        """Every process ended but those of spares still waiting and the rendezvous
        store (nobody waits for them)."""
        return all(
            p.key in self.ended or self.waiting_spare(p.host) or p.role == POLICY_RENDEZVOUS_ROLE
            for p in self.processes
        )

    @property
    def over(self) -> bool:
        return self.verdict is not None and self.all_ended

    @property
    def state(self) -> str:
        if self.verdict is not None:
            return self.verdict
        return "hung" if self.hung else "running"

    def feed(self, report: Any) -> bool:
        if isinstance(report, ProcessEnded):
            return self._ended(report)
        if isinstance(report, HostSilent):
            return self._silent(report)
        if isinstance(report, StopAsked):
            return self._decide(STOPPED, report.at)
        if isinstance(report, HangSeen):
            self.hung = True
            if report.stop and self.verdict is None:
                self.first_failure = Failure(
                    "", None, None, None, None, f"hung: no progress for {report.idle_s:.0f} s",
                    report.at,
                )  # fmt: skip
                return self._decide(FAILED, report.at)
            return False
        raise TypeError(f"not a policy report: {report!r}")

    def _decide(self, verdict: str, at: float) -> bool:
        """Set the verdict (once) and order the stop of what still runs (once)."""
        if self.verdict is None:
            self.verdict = verdict
        if self.stop_ordered_at is not None:
            return False
        self.stop_ordered_at = at
        return not self.all_ended

    def _ended(self, report: ProcessEnded) -> bool:
        proc = self.process(report.host, report.name)
        if proc is None or proc.key in self.ended:
            return False
        self.ended[proc.key] = report
        if proc.role == POLICY_RENDEZVOUS_ROLE and not (
            self.stop_ordered_at or report.stop_requested
        ):
            # Nothing can meet again without the store: the job ends, named so.
            self.first_failure = self._failure(proc, report)
            how = self.first_failure.reason
            self.first_failure.reason = f"the rendezvous store on {proc.host} exited ({how})"
            return self._decide(FAILED, report.at)
        failed = report.exit_code != 0 and not self.waiting_spare(proc.host)
        if failed and not report.stop_requested and self._is_cause(report):
            self.first_failure = self._failure(proc, report)
        elif failed and self.then_failure is None and self._after_host_loss(proc):
            self.then_failure = self._failure(proc, report)
        if self.verdict is not None:
            return False
        if report.stop_requested:
            return self._decide(STOPPED, report.at)
        if self.first_failure is not None and self.fail_fast:
            return self._decide(FAILED, report.at)
        if self.kind == "ps" and self.first_failure is None and self._finishers_done():
            # Parameter servers never exit on their own once training is over.
            return self._decide(SUCCEEDED, report.at)
        return self._settle(report.at)

    def _settle(self, at: float) -> bool:
        """Every process ended (but waiting spares'): the verdict, and the spares' stop."""
        if not self.job_ended:
            return False
        verdict = FAILED if self.first_failure is not None else SUCCEEDED
        if self.all_ended:
            self.verdict = verdict
            return False
        return self._decide(verdict, at)  # only spares wait: they are stopped

    def _after_host_loss(self, proc: PolicyProcess) -> bool:
        current = self.first_failure
        return current is not None and current.process is None and proc.host != current.host

    def _is_cause(self, report: ProcessEnded) -> bool:
        """The first failure seen, or one reported later that ended before it and before
        the stop this policy ordered (its peers' failures were the consequence), or one
        whose lines say nothing of a lost peer or a signal, ended within
        POLICY_CAUSE_WINDOW_S after a failure whose lines do (that one followed it)."""
        current = self.first_failure
        if current is None:
            return self.stop_ordered_at is None or report.at < self.stop_ordered_at
        if current.process is None:
            return False  # a silent host or a hang: that is the cause
        if (
            followed_another(current.lines)
            and not followed_another(report.lines)
            and report.signal is None
            and report.exit_code is not None
            and report.at - current.at <= POLICY_CAUSE_WINDOW_S
        ):
            return True  # the failure the current one followed, ended later
        if self.stop_ordered_at is not None and report.at >= self.stop_ordered_at:
            return False
        return report.at < current.at

    def _finishers_done(self) -> bool:
        finishers = [p for p in self.processes if p.role in POLICY_PS_FINISHERS]
        return bool(finishers) and all(
            p.key in self.ended and self.ended[p.key].exit_code == 0 for p in finishers
        )

    def _silent(self, report: HostSilent) -> bool:
        lost = [p for p in self.processes if p.host == report.host and p.key not in self.ended]
        for proc in lost:
            # Out of sight for good: they count as ended, so the job can be over.
            self.ended[proc.key] = ProcessEnded(proc.host, proc.name, None, report.at)
        # A host of the job with no process of its own (Horovod's) counts while in it.
        member = report.host in self.member_hosts and report.host in self.hosts_now
        if not (lost or member) or self.verdict is not None or self.waiting_spare(report.host):
            return False  # a waiting spare lost: one replacement less, nothing else
        reason = report.reason
        if report.host == self.rendezvous_host:
            reason = f"rendezvous host {report.host} lost: {reason}"
        elif self.min_hosts:
            if self._scale_down(report):
                return self._settle(report.at)
            left = len(self.hosts_now) - 1
            reason += (
                f"; the first host, {report.host}, holds the rendezvous"
                if report.host == self.master_host
                else f"; {left} of {len(self.hosts)} hosts left, below --min-hosts {self.min_hosts}"
            )
        if self.first_failure is None:
            self.first_failure = Failure(report.host, None, None, None, None, reason, report.at)
        if self.fail_fast:
            # The other ranks would wait in a collective for the lost ones forever.
            return self._decide(FAILED, report.at)
        if self.all_ended:
            self.verdict = FAILED
        return False

    def _scale_down(self, report: HostSilent) -> bool:
        """Elastic: the lost host leaves the job (its processes count as ended, none of
        them a failure) while at least ``min_hosts`` remain and it is not the rendezvous
        host; torchrun's survivors meet again without it."""
        left = [h for h in self.hosts_now if h != report.host]
        if report.host == self.master_host or len(left) < self.min_hosts:
            return False
        self.scale_downs.append(
            {
                "host": report.host,
                "cause": report.reason,
                "at": report.at,
                "hosts_now": left,
                "hosts_total": len(self.hosts),
            }
        )
        return True

    @staticmethod
    def _failure(proc: PolicyProcess, report: ProcessEnded) -> Failure:
        if report.exit_code is None:
            reason = "ended without recording an exit status (killed?)"
        elif report.signal:
            reason = f"killed by {report.signal}"
        else:
            reason = f"exit status {report.exit_code}"
        named = report.rank
        return Failure(
            proc.host,
            proc.name,
            named if named is not None else proc.rank,
            report.exit_code,
            report.signal,
            reason,
            report.at,
            tuple(report.lines),
            (named,) if named is not None else proc.ranks,
        )
