"""The job's supervisor: one per host of a job, started detached by ``jobctl start``.

This part is the main loop. It watches its host's processes of the job
(``supervisor_local.py``) and talks to the other hosts' supervisors over TCP on the
training network (``supervisor_peers.py``; hosts often have no SSH to each other), every
message signed with the job's secret (``supervisor_wire.py``). The leader (the job's
first host) listens; followers connect to it, report their processes' ends and send
heartbeats; the leader feeds the job's policy (``supervisor_policy.py``) and, when it
says so, orders every host to stop (TERM, then KILL after the grace). A host that goes
silent is lost (fail-fast); a host whose supervisor ended while the host lives reads
unsupervised and its training runs on (see ``supervisor_peers.py``). The job's truth goes
to ``supervisor.json`` (the leader's is the job's, a follower's, named
``supervisor.HOST.json``, holds its own processes) and ``events.jsonl`` (a follower's:
``events.HOST.jsonl``) in the job directory; the supervisor exits once the job has
ended. It is nobody's parent: if it dies, training runs on. Every 15 s it takes one GPU
sample of the job's GPUs, and with a hang timeout it watches for a hang and takes the
captures (``supervisor_hang.py``, over ``hang_capture.py``'s functions).

One source on the host, assembled by ``supervisor_source.py``: ``jobctl_common.py``,
``failure_lines.py``, ``supervisor_wire.py``, ``supervisor_policy.py``,
``hang_inspect.py`` and ``hang_capture.py`` (when present), ``supervisor_local.py``,
``supervisor_peers.py``, ``supervisor_hang.py``, then this file, run as
``python3 JOB_DIR/supervisor[.HOST].py JOB_DIR HOST``. Standard library only, Python >= 3.7.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import sys
import time
from typing import Any

# After its last write, the leader waits this long at most for notifications under way
# (a webhook's retries with backoff) before it exits.
NOTIFY_DRAIN_S = 60.0
# A follower's failure this close before the leader's loss was seen still followed it
# (the loss and a rank's error on it race to this supervisor).
LEADER_LOSS_SLACK_S = 2.0
# Nor one that came this long after it (a leader's supervisor that died on a live host
# leaves the job running: a failure minutes later is the follower's own).
LEADER_LOSS_WINDOW_S = 300.0

if __name__ != "__main__":  # imported by the console/tests; on a host the parts precede
    from console.hostprogs.guarded_listener import GuardedListener, guarded_dispatch
    from console.hostprogs.jobctl.common import (
        PRIVATE_UMASK,
        STOP_REQUESTED,
        read_text,
        tighten,
        write_atomic,
    )
    from console.hostprogs.pace.hook import SvPace
    from console.hostprogs.supervisor.drain import SvDrain
    from console.hostprogs.supervisor.elastic import SvElastic
    from console.hostprogs.supervisor.hang import SvHangWatch, sv_hang_api
    from console.hostprogs.supervisor.link import SvPeer
    from console.hostprogs.supervisor.local import (
        SUPERVISOR_VERSION,
        SV_CONFIG,
        SV_EVENTS,
        SV_PID,
        SV_SECRET,
        SV_STATE,
        SvLocal,
        sv_path,
    )
    from console.hostprogs.supervisor.notify import SvNotifier, failure_reason
    from console.hostprogs.supervisor.peers import SvPeers
    from console.hostprogs.supervisor.policy import JobPolicy, PolicyProcess, ProcessEnded
    from console.hostprogs.supervisor.restart import SvRestarts
    from console.hostprogs.supervisor.wire import WireGuard


class Supervisor(SvHangWatch, SvRestarts, SvElastic, SvDrain, SvPace, SvPeers):
    """The loop: local processes, peers, policy, state file (see the module doc)."""

    def __init__(self, job_dir: str, host: str | None = None) -> None:
        self.job_dir = job_dir
        # A follower's config carries its host's name; the leader's (or, started without
        # a host, the only one) the plain name.
        config = sv_path(job_dir, SV_CONFIG, host or "", False)
        if not os.path.exists(config):
            config = os.path.join(job_dir, SV_CONFIG)
        cfg = json.loads(read_text(config) or "{}")
        self.cfg = cfg
        self.job_id = str(cfg["job_id"])
        self.host = str(cfg["host"])
        self.leader_host = str(cfg["leader"])
        self.is_leader = self.host == self.leader_host
        secret = bytes.fromhex(read_text(self.path(SV_SECRET)) or "")
        self.secret = secret
        self.guard = WireGuard(secret, self.job_id)
        self.grace = float(cfg.get("grace", 10.0))
        self.poll_s = float(cfg.get("poll_s", 0.25))
        self.beat_s = float(cfg.get("heartbeat_s", 1.0))
        self.silence_s = float(cfg.get("silence_s", 4.0))
        self.connect_s = float(cfg.get("connect_s", 60.0))
        self.hang_timeout = cfg.get("hang_timeout")
        self.stop_on_hang = bool(cfg.get("stop_on_hang"))
        every = [
            PolicyProcess(p["host"], p["name"], p["role"], tuple(p.get("ranks") or ()))
            for p in cfg["processes"]
        ]
        mine = [p for p in cfg["processes"] if p["host"] == self.host]
        self.local = SvLocal(job_dir, self.job_id, mine)
        # The leader judges the whole job; a follower only its own host (it judges alone
        # only when the leader is gone).
        scope = every if self.is_leader else [p for p in every if p.host == self.host]
        self.policy = JobPolicy(scope, str(cfg["kind"]), bool(cfg.get("fail_fast", True)))
        self.policy.max_restarts = int(cfg.get("max_restarts") or 0)
        self.init_restarts()
        self.followers = sorted({p.host for p in every if p.host != self.leader_host})
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.hang: dict[str, Any] | None = None
        self.progress: dict[str, float] = {}
        self.peers: list[SvPeer] = []
        # epoll where there is one: select() cannot take a descriptor >= 1024.
        self.selector = selectors.DefaultSelector()
        self.listener: GuardedListener | None = None
        self.refusals: dict[str, Any] = {}
        self.leader: SvPeer | None = None
        self.leader_seen = time.time()
        self.ever_connected = False
        self.remote_verdict: dict[str, Any] | None = None  # a follower's, from the leader
        self.stop_asked_at: float | None = None
        self.last_write = 0.0
        self.last_beat = 0.0
        self.dirty = True
        self.done = False
        self.hang_api = sv_hang_api()
        self.remote_first_error: dict[str, list[str]] = {}  # a remote failure's cause
        self.silent_since: dict[str, float] = {}  # follower -> since when it is missing
        self.seen_hosts: set = set()  # followers that connected at least once
        self.leader_error = "not connected yet"
        self.linger_until = 0.0
        self.leader_lost = False
        self.unsupervised: dict[str, dict[str, Any]] = {}
        self.last_connect = 0.0
        self.last_gpu = 0.0
        # Only the leader tells a person (one notification per event, not one per host).
        self.notifier = SvNotifier(cfg if self.is_leader else {}, job_dir, self.event)
        self.hang_told = False
        self.init_elastic()  # after the policy and peers' state: --min-hosts
        self.init_drain()
        self.init_pace()  # pace/hook.py: per-rank busy vs wait, the leader's slow ranks

    # -- records -------------------------------------------------------------------------

    def path(self, name: str) -> str:
        return sv_path(self.job_dir, name, self.host, self.is_leader)

    def event(self, event: str, **details: Any) -> None:
        line = dict(details, t=time.time(), host=self.host, event=event)
        with open(self.path(SV_EVENTS), "a") as handle:
            handle.write(json.dumps(line) + "\n")

    def state(self) -> str:
        """The verdict only once this host's part has ended (readers take a final state
        for "over"); until then running, or hung."""
        if self.ended_at is None:
            return "hung" if self.policy.hung else "running"
        if self.remote_verdict is not None:
            return str(self.remote_verdict["state"])
        return self.policy.state

    def first_failure(self) -> dict[str, Any] | None:
        if self.remote_verdict is not None:
            return self.remote_verdict.get("first_failure")
        failure = self.policy.first_failure
        if failure is None:
            return None
        record = failure.to_json()
        end = self.local.ended.get(failure.process or "")
        record["first_error"] = list(end["first_error"]) if end else []
        if failure.host != self.host:
            record["first_error"] = self.remote_first_error.get(failure.process or "", [])
        return self.after_leader_loss(record)

    def after_leader_loss(self, record: dict[str, Any]) -> dict[str, Any]:
        """A follower judging alone: its own failure once the leader had gone (torchrun's
        RendezvousConnectionError, the store gone with the leader's host) followed the
        leader's loss, which is the cause (its own failure kept under ``then``)."""
        gone = self.unsupervised.get(self.leader_host)
        if isinstance(gone, dict):
            lost_at, why = gone.get("at"), str(gone.get("why") or "")
        elif self.leader_lost:  # silent: last heard from then
            lost_at, why = self.leader_seen, f"silent: {self.leader_error}"
        else:
            return record
        at = record.get("at")
        # --rendezvous-host: the leader's host holds the store (supervisor/rendezvous.py).
        role = "rendezvous host" if getattr(self, "rendezvous_host", "") else "leader"
        if self.is_leader or lost_at is None:
            return record
        if record.get("host") == self.leader_host:
            if record.get("process"):
                return record
            # Its peers saw the leader's host go before its own ranks failed: the loss
            # is the cause, named as the leader's, and its own failure what followed.
            followed = self.policy.then_failure
            named = {**record, "reason": f"the {role} {self.leader_host} lost ({record['reason']})"}
            if followed is not None and followed.host == self.host:
                own = followed.to_json()
                end = self.local.ended.get(followed.process or "") or {}
                own["first_error"] = list(end.get("first_error", []))
                named["then"] = own
            return named
        if isinstance(at, (int, float)) and not (
            lost_at - LEADER_LOSS_SLACK_S <= at <= lost_at + LEADER_LOSS_WINDOW_S
        ):
            return record  # it failed first, or long after: its own failure is the cause
        then = f"then {record.get('process') or 'a process'} on {self.host}: {record['reason']}"
        return {
            **record,
            "host": self.leader_host,
            "process": None,
            "rank": None,
            "ranks": [],
            "exit_code": None,
            "signal": None,
            "reason": f"the {role} {self.leader_host} lost ({why})",
            "lines": [then, *record.get("lines", [])[-5:]],
            "at": lost_at,
            "first_error": [],
            "then": record,
        }

    def write(self, force: bool = False) -> None:
        now = time.time()
        if not (force or self.dirty or now - self.last_write >= 2.0):
            return
        processes = {}
        for proc in self.policy.processes:
            end = self.policy.ended.get(proc.key)
            name = proc.name if proc.host == self.host else f"{proc.host}/{proc.name}"
            processes[name] = {
                "host": proc.host,
                "rank": proc.rank,
                "exit_code": end.exit_code if end else None,
                "signal": end.signal if end else None,
                "ended_at": end.at if end else None,
            }
        record = {
            "v": SUPERVISOR_VERSION,
            "host": self.host,
            "leader": self.is_leader,
            "pid": os.getpid(),
            "heartbeat": now,
            "state": self.state(),
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "first_failure": self.first_failure(),
            "hang": self.hang,
            "processes": processes,
            "unsupervised": self.unsupervised,  # host -> {at, why}: its supervisor ended
            **self.restart_record(),
            **self.elastic_record(),
            **self.pace_record(),  # slow_ranks, rank_pace, slow_periods (the leader's)
        }
        write_atomic(self.path(SV_STATE), json.dumps(record) + "\n")
        self.last_write = now
        self.dirty = False

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> None:
        write_atomic(self.path(SV_PID), f"{os.getpid()}\n")
        if self.is_leader:
            self.listen()
        self.event("supervisor-started", leader=self.is_leader, pid=os.getpid())
        self.write(force=True)
        while not self.done:
            self.step()
        self.write(force=True)
        self.notifier.drain(NOTIFY_DRAIN_S)

    def step(self) -> None:
        if not self.is_leader and self.leader is None and not self.policy.over:
            self.connect()
        guarded_dispatch(self.selector, self.poll_s)  # the port, the peers, the leader
        self.watch_local()
        self.horovod_watch()  # elastic.py: before the restarts (a lost host's drop is none)
        self.tell_store()  # rendezvous.py: a lost host reaches the store at once
        self.watch_restarts()
        self.local.tick()
        self.pace_tick()
        now = time.time()
        if now - self.last_beat >= self.beat_s:
            self.last_beat = now
            self.beat()
            self.check_silence()
            self.check_membership()
            self.check_drain()
            self.check_hang()
            self.gpu_sample()
            if self.hang is not None and not self.hang_told:
                self.hang_told = True
                idle = float(self.hang.get("idle_s") or 0)
                self.notifier.notify("hung", "hung", f"no progress for {idle:.0f} s", self.host)
        self.maybe_finish()
        self.write()

    # -- local processes -----------------------------------------------------------------

    def watch_local(self) -> None:
        if self.stop_asked_at is None:
            with contextlib.suppress(OSError):
                self.stop_asked_at = os.stat(os.path.join(self.job_dir, STOP_REQUESTED)).st_mtime
                self.event("stop-requested")
        ends = self.local.poll(self.stop_asked_at)
        if ends and self.local.all_ended:
            # What the job's programs wrote here with the login umask (torchrun's logs,
            # hang dumps) becomes private too, before anyone hears the job here ended.
            tighten(self.job_dir)
        for end in ends:
            self.dirty = True
            self.event("process-ended", **{k: v for k, v in end.items() if k != "lines"})
            if self.restart_in_place(end):
                continue  # --max-restarts: no end for the policy
            self.feed_end(self.host, end)
            if not self.is_leader:
                self.send_leader({"type": "ended", "end": end})

    def feed_end(self, host: str, end: dict[str, Any]) -> None:
        report = ProcessEnded(
            host,
            str(end["name"]),
            end.get("exit_code"),
            float(end.get("at") or time.time()),
            end.get("signal"),
            bool(end.get("stop_requested")),
            tuple(end.get("lines") or ()),
            end.get("rank") if isinstance(end.get("rank"), int) else None,
        )
        if host != self.host and end.get("first_error"):
            self.remote_first_error[str(end["name"])] = list(end["first_error"])
        if self.remote_verdict is not None:
            return
        self.apply(self.policy.feed(report))

    def apply(self, stop_now: bool) -> None:
        """After a policy decision: order the stop everywhere once it says so."""
        self.dirty = True
        if not stop_now and self.policy.verdict is None:
            return
        if stop_now:
            self.event(
                "stop-ordered", state=self.policy.verdict, first_failure=self.first_failure()
            )
            self.local.stop(self.grace)
            if self.is_leader:
                self.broadcast(
                    {
                        "type": "stop",
                        "state": self.policy.verdict,
                        "first_failure": self.first_failure(),
                    }
                )

    # -- the end -------------------------------------------------------------------------

    def maybe_finish(self) -> None:
        if not self.local.all_ended:
            return
        if self.is_leader:
            if not (self.policy.over or self.decided_without_unsupervised()):
                return
            if self.ended_at is None:
                self.ended_at = time.time()
                self.event("final", state=self.policy.verdict, first_failure=self.first_failure())
                reason, where = failure_reason(self.first_failure())
                final = str(self.policy.verdict)
                self.notifier.notify(final, final, reason, where)
                self.broadcast(
                    {
                        "type": "final",
                        "state": self.policy.verdict,
                        "first_failure": self.first_failure(),
                    }
                )
                self.linger_until = time.time() + 2.0
                self.write(force=True)
            # Followers leave once they have the final word; give them a moment.
            if not any(p.host for p in self.peers) or time.time() > self.linger_until:
                self.finish()
            return
        verdict = self.remote_verdict
        # Without the leader's final word only once the leader is lost for good, or its
        # supervisor ended (then this host's part is judged here alone).
        alone = self.leader_lost or self.leader_host in self.unsupervised
        if (verdict is not None and verdict.get("final")) or alone:
            if self.ended_at is None:
                self.ended_at = time.time()
                self.event("final", state=self.state(), first_failure=self.first_failure())
            self.finish()

    def decided_without_unsupervised(self) -> bool:
        """The job is decided and what still runs is on hosts whose supervisor ended:
        nothing here can stop those (the console can, over ssh), so do not wait on them."""
        if self.policy.verdict is None or not self.unsupervised:
            return False
        return all(
            p.key in self.policy.ended or p.host in self.unsupervised for p in self.policy.processes
        )

    def finish(self) -> None:
        deadline = time.time() + 3.0
        while self.local.leftovers() and time.time() < deadline:
            self.local._signal(signal.SIGKILL)
            time.sleep(0.1)
        self.dirty = True
        tighten(self.job_dir)  # and what was written since (hang captures)
        self.write(force=True)
        self.done = True


def supervisor_main() -> None:
    os.umask(PRIVATE_UMASK)  # its files hold the job's state and secret
    job_dir = os.path.abspath(sys.argv[1])
    supervisor = Supervisor(job_dir, sys.argv[2] if len(sys.argv) > 2 else None)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        supervisor.run()
    except Exception as exc:
        supervisor.event("supervisor-crashed", why=repr(exc))
        raise


if __name__ == "__main__":
    supervisor_main()
