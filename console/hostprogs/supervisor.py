"""The job's supervisor: one per host of a job, started detached by ``jobctl start``.

It watches its host's processes of the job (their ``.exit`` files and process groups, as
jobctl records them) and talks to the other hosts' supervisors over TCP on the training
network (hosts often have no SSH to each other), every message signed with the job's
secret (``supervisor_wire.py``). The leader (the job's first host) listens; followers
connect to it, report their processes' ends and send heartbeats; the leader feeds the
job's policy (``supervisor_policy.py``) and, when it says so, orders every host to stop
(TERM, then KILL after the grace). A follower that loses the leader stops its own
processes; the leader that loses a follower fails the job naming the host. The job's
truth goes to ``supervisor.json`` (the leader's is the job's, a follower's holds its own
processes) and ``events.jsonl`` in the job directory; the supervisor exits once the job
has ended. It is nobody's parent: if it dies, training runs on (the console then shows
the job unsupervised).

One source on the host: ``jobctl.py`` (without its main), ``failure_lines.py``,
``supervisor_wire.py``, ``supervisor_policy.py``, ``hang_capture.py`` (when present),
then this file (see ``console/jobs/supervisor_program.py``), run as
``python3 JOB_DIR/supervisor.py JOB_DIR``. Standard library only, Python >= 3.7.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

if __name__ != "__main__":  # imported by the console/tests; on a host the parts precede
    from console.hostprogs.failure_lines import first_error
    from console.hostprogs.jobctl import (
        STOP_REQUESTED,
        exit_status,
        job_pgids,
        marked_pids,
        read_text,
        write_atomic,
    )
    from console.hostprogs.supervisor_policy import (
        FAILED,
        HangSeen,
        HostSilent,
        JobPolicy,
        PolicyProcess,
        ProcessEnded,
        StopAsked,
    )
    from console.hostprogs.supervisor_wire import WireGuard, WireRefused, wire_pack

SUPERVISOR_PROGRAM = "supervisor"
SUPERVISOR_VERSION = 1  # of supervisor.json and the wire messages
SV_CONFIG = "supervisor-config.json"
SV_SECRET = "supervisor.secret"
SV_PID = "supervisor.pid"
SV_PORT = "supervisor.port"
SV_STATE = "supervisor.json"
SV_EVENTS = "events.jsonl"
SV_LOG = "supervisor.log"
SV_TAIL_LINES = 15
SV_SEARCHED_BYTES = 64 * 1024  # of each failed process's output, for the first error
SV_FINAL = ("succeeded", "failed", "stopped")


def sv_signal_name(code: int | None) -> str | None:
    """The signal a shell's status 128+N reports (the wrapper records ``$?``)."""
    if code is None or code <= 128 or code > 128 + 64:
        return None
    try:
        return signal.Signals(code - 128).name
    except ValueError:
        return None


def sv_tail(path: str, limit: int) -> list[str]:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            data = handle.read()
    except OSError:
        return []
    lines = data.decode(errors="replace").splitlines()
    return lines[1:] if size > limit and lines else lines


class SvLocal:
    """This host's processes of the job: which ended, how, and stopping them."""

    def __init__(self, job_dir: str, job_id: str, procs: list[dict[str, Any]]) -> None:
        self.job_dir = job_dir
        self.job_id = job_id
        self.procs = {p["name"]: p for p in procs}
        self.pgids = job_pgids(job_dir, list(self.procs))
        self.ended: dict[str, dict[str, Any]] = {}
        self.term_at: float | None = None
        self.kill_at: float | None = None
        self.groups: set = set()

    def poll(self, stop_asked_at: float | None) -> list[dict[str, Any]]:
        """Processes found ended since the last poll: a status file, or a vanished group."""
        found = []
        for name in self.procs:
            if name in self.ended:
                continue
            status = exit_status(self.job_dir, name)
            if status is None and self._alive(name):
                continue
            if status is None:
                status = exit_status(self.job_dir, name)  # written as the group ended
            at = time.time()
            with contextlib.suppress(OSError):
                at = os.stat(os.path.join(self.job_dir, name + ".exit")).st_mtime
            end = {
                "name": name,
                "exit_code": status,
                "signal": sv_signal_name(status),
                "at": at,
                "stop_requested": stop_asked_at is not None and at >= stop_asked_at,
                "lines": [],
                "first_error": [],
            }
            if status != 0 and not end["stop_requested"] and self.term_at is None:
                end["lines"], end["first_error"] = self._why(name)
            self.ended[name] = end
            found.append(end)
        return found

    def _alive(self, name: str) -> bool:
        pgid = self.pgids.get(name)
        if pgid is None:
            self.pgids.update(job_pgids(self.job_dir, [name]))
            pgid = self.pgids.get(name)
            if pgid is None:
                return False
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def _why(self, name: str) -> tuple[list[str], list[str]]:
        """The failed process's last output lines and the first error before them."""
        lines: list[str] = []
        cause: list[str] = []
        for path in self.procs[name].get("logs") or []:
            path = os.path.expanduser(path)
            lines += sv_tail(path, 8 * 1024)[-SV_TAIL_LINES:]
            found = list(first_error(sv_tail(path, SV_SEARCHED_BYTES)))
            if found and not cause:
                cause = found
        lines = lines[-2 * SV_TAIL_LINES :]
        if set(cause) <= set(lines):
            cause = []  # the last lines already show it
        return lines, cause

    @property
    def all_ended(self) -> bool:
        return len(self.ended) == len(self.procs)

    def stop(self, grace: float) -> None:
        """TERM every process group of the job here and every marked process (torchrun's
        workers lead sessions of their own); KILL follows in :meth:`tick`."""
        if self.term_at is not None:
            return
        self.term_at = time.time()
        self.kill_at = self.term_at + grace
        self.groups = set(job_pgids(self.job_dir, list(self.procs)).values())
        self._signal(signal.SIGTERM)

    def tick(self) -> None:
        if self.kill_at is not None and time.time() >= self.kill_at:
            self.kill_at = None
            self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        me = os.getpgrp()
        for pgid in sorted(self.groups):
            if pgid != me:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, sig)
        for pid in marked_pids(self.job_id):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                pgid = os.getpgid(pid)
                if pgid != me and pgid not in self.groups:
                    self.groups.add(pgid)
                    os.killpg(pgid, sig)
                else:
                    os.kill(pid, sig)

    def leftovers(self) -> list[int]:
        return marked_pids(self.job_id)


class SvPeer:
    """One TCP connection to another supervisor: buffered signed lines both ways."""

    def __init__(self, sock: socket.socket, address: str) -> None:
        self.sock = sock
        self.address = address
        self.host: str | None = None  # known once its hello was accepted
        self.buffer = b""
        self.last_seen = time.time()

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, data: bytes) -> bool:
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False

    def lines(self) -> list[bytes] | None:
        """Complete lines read now; None when the connection closed."""
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:
            return None
        if not data:
            return None
        self.buffer += data
        *done, self.buffer = self.buffer.split(b"\n")
        return done


class Supervisor:
    """The loop: local processes, peers, policy, state file (see the module doc)."""

    def __init__(self, job_dir: str) -> None:
        self.job_dir = job_dir
        cfg = json.loads(read_text(os.path.join(job_dir, SV_CONFIG)) or "{}")
        self.cfg = cfg
        self.job_id = str(cfg["job_id"])
        self.host = str(cfg["host"])
        self.leader_host = str(cfg["leader"])
        self.is_leader = self.host == self.leader_host
        secret = bytes.fromhex(read_text(os.path.join(job_dir, SV_SECRET)) or "")
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
        self.followers = sorted({p.host for p in every if p.host != self.leader_host})
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.hang: dict[str, Any] | None = None
        self.progress: dict[str, float] = {}
        self.peers: list[SvPeer] = []
        self.listener: socket.socket | None = None
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

    # -- records -------------------------------------------------------------------------

    def event(self, event: str, **details: Any) -> None:
        line = dict(details, t=time.time(), host=self.host, event=event)
        with open(os.path.join(self.job_dir, SV_EVENTS), "a") as handle:
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
        return record

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
        }
        write_atomic(os.path.join(self.job_dir, SV_STATE), json.dumps(record) + "\n")
        self.last_write = now
        self.dirty = False

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> None:
        write_atomic(os.path.join(self.job_dir, SV_PID), f"{os.getpid()}\n")
        if self.is_leader:
            self.listen()
        self.event("supervisor-started", leader=self.is_leader, pid=os.getpid())
        self.write(force=True)
        while not self.done:
            self.step()
        self.write(force=True)

    def listen(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.cfg.get("bind", ""), int(self.cfg.get("port") or 0)))
        sock.listen(64)
        sock.setblocking(False)
        self.listener = sock
        write_atomic(os.path.join(self.job_dir, SV_PORT), f"{sock.getsockname()[1]}\n")

    def step(self) -> None:
        readable: list[Any] = list(self.peers)
        if self.listener is not None:
            readable.append(self.listener)
        if not self.is_leader and self.leader is None and not self.policy.over:
            self.connect()
        if self.leader is not None:
            readable.append(self.leader)
        ready, _w, _x = select.select(readable, [], [], self.poll_s)
        for item in ready:
            if item is self.listener:
                self.accept()
            else:
                self.receive(item)
        self.watch_local()
        self.local.tick()
        now = time.time()
        if now - self.last_beat >= self.beat_s:
            self.last_beat = now
            self.beat()
            self.check_silence()
            self.check_hang()
        self.maybe_finish()
        self.write()

    # -- local processes -----------------------------------------------------------------

    def watch_local(self) -> None:
        if self.stop_asked_at is None:
            with contextlib.suppress(OSError):
                self.stop_asked_at = os.stat(os.path.join(self.job_dir, STOP_REQUESTED)).st_mtime
                self.event("stop-requested")
        for end in self.local.poll(self.stop_asked_at):
            self.dirty = True
            self.event("process-ended", **{k: v for k, v in end.items() if k != "lines"})
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

    # -- peers ---------------------------------------------------------------------------

    def accept(self) -> None:
        assert self.listener is not None
        try:
            sock, address = self.listener.accept()
        except OSError:
            return
        sock.setblocking(False)
        self.peers.append(SvPeer(sock, f"{address[0]}:{address[1]}"))

    def connect(self) -> None:
        address = (str(self.cfg["leader_address"]), int(self.cfg["leader_port"]))
        try:
            sock = socket.create_connection(address, timeout=min(2.0, self.silence_s))
        except OSError as exc:
            self.leader_error = str(exc)
            return
        sock.setblocking(False)
        self.leader = SvPeer(sock, f"{address[0]}:{address[1]}")
        self.leader.host = self.leader_host
        self.leader_seen = time.time()
        self.ever_connected = True
        self.send_leader({"type": "hello", "host": self.host})
        for end in self.local.ended.values():
            self.send_leader({"type": "ended", "end": end})  # again: the leader ignores repeats

    def send_leader(self, message: dict[str, Any]) -> None:
        if self.leader is not None and not self.leader.send(self.pack(message)):
            self.drop(self.leader, "send failed")

    def pack(self, message: dict[str, Any]) -> bytes:
        return wire_pack(self.secret, self.job_id, dict(message, sender=self.host))

    def broadcast(self, message: dict[str, Any]) -> None:
        data = self.pack(message)
        for peer in list(self.peers):
            if peer.host is not None and not peer.send(data):
                self.drop(peer, "send failed")

    def drop(self, peer: SvPeer, why: str) -> None:
        with contextlib.suppress(OSError):
            peer.sock.close()
        if peer is self.leader:
            self.leader = None
            self.leader_error = why
        elif peer in self.peers:
            self.peers.remove(peer)
            if peer.host is not None:
                self.event("peer-disconnected", peer=peer.host, why=why)

    def receive(self, peer: SvPeer) -> None:
        lines = peer.lines()
        if lines is None:
            self.drop(peer, "connection closed")
            return
        for line in lines:
            try:
                message = self.guard.open(line)
            except WireRefused as exc:
                self.event("refused", peer=peer.address, why=str(exc))
                self.drop(peer, f"refused: {exc}")
                return
            peer.last_seen = time.time()
            if peer is self.leader:
                self.leader_seen = peer.last_seen
                self.from_leader(message)
            else:
                self.from_follower(peer, message)

    def from_follower(self, peer: SvPeer, message: dict[str, Any]) -> None:
        kind = message.get("type")
        sender = str(message.get("sender"))
        if kind == "hello":
            if sender not in self.followers:
                self.event("refused", peer=peer.address, why=f"{sender!r} is no host of the job")
                self.drop(peer, "not a host of the job")
                return
            peer.host = sender
            self.seen_hosts.add(sender)
            self.event("peer-connected", peer=sender, address=peer.address)
            if self.policy.stop_ordered_at is not None:
                peer.send(
                    self.pack(
                        {
                            "type": "stop",
                            "state": self.policy.verdict,
                            "first_failure": self.first_failure(),
                        }
                    )
                )
            return
        if peer.host is None:
            self.drop(peer, "no hello")
            return
        if kind == "ended":
            self.feed_end(peer.host, dict(message.get("end") or {}))
        elif kind == "beat":
            if isinstance(message.get("progress"), (int, float)):
                self.progress[peer.host] = float(message["progress"])
        elif kind == "stop":
            # The job's own stop: the only thing a peer may ask.
            self.event("stop-asked", peer=peer.host)
            self.apply(self.policy.feed(StopAsked(peer.host, time.time())))

    def from_leader(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind in ("stop", "final"):
            if self.remote_verdict is None or kind == "final":
                self.remote_verdict = {
                    "state": message.get("state") or FAILED,
                    "first_failure": message.get("first_failure"),
                    "final": kind == "final",
                }
                self.dirty = True
            if kind == "stop" and self.local.term_at is None:
                self.event("stop-ordered", by=self.leader_host, state=message.get("state"))
                self.local.stop(self.grace)
        elif kind == "capture":
            self.capture()

    def beat(self) -> None:
        progress = self.local_progress()
        if self.is_leader:
            self.broadcast({"type": "beat"})
        else:
            self.send_leader({"type": "beat", "progress": progress})

    def check_silence(self) -> None:
        now = time.time()
        if self.is_leader:
            connected = {p.host for p in self.peers if p.host is not None}
            for peer in list(self.peers):
                if peer.host is not None and now - peer.last_seen > self.silence_s:
                    self.drop(peer, f"no heartbeat for {now - peer.last_seen:.0f} s")
            for host in self.followers:
                if host in connected and any(p.host == host for p in self.peers):
                    self.silent_since.pop(host, None)
                    continue
                if self.follower_done(host):
                    continue
                since = self.silent_since.setdefault(
                    host, now if host in self.seen_hosts else self.started_at
                )
                # A host that never connected gets the start's time, unless the job is
                # already decided (then nobody waits long for its word).
                seen = host in self.seen_hosts or self.policy.verdict is not None
                limit = self.silence_s if seen else self.connect_s
                if now - since > limit:
                    why = "connection lost" if host in self.seen_hosts else "never connected"
                    self.silent(host, f"{why} (its supervisor was silent for {now - since:.0f} s)")
            self.seen_hosts |= connected
            return
        limit = self.silence_s if self.ever_connected else self.connect_s
        if self.leader is None and not self.leader_lost and now - self.leader_seen > limit:
            self.silent(
                self.leader_host,
                f"connection lost (the leader's supervisor was silent for "
                f"{now - self.leader_seen:.0f} s: {self.leader_error})",
            )
        elif self.leader is not None and now - self.leader_seen > self.silence_s:
            self.drop(self.leader, f"no heartbeat for {now - self.leader_seen:.0f} s")

    def follower_done(self, host: str) -> bool:
        return all(p.key in self.policy.ended for p in self.policy.processes if p.host == host)

    def silent(self, host: str, reason: str) -> None:
        self.event("host-silent", peer=host, why=reason)
        if host == self.leader_host and not self.is_leader:
            self.leader_lost = True
            # Judge alone: the leader's processes are out of sight, so they count as lost.
            self.policy.processes.append(PolicyProcess(host, "(leader)", "leader"))
        self.apply(self.policy.feed(HostSilent(host, reason, time.time())))

    # -- hang (hang_capture.py's functions when that part is present) --------------------

    def local_progress(self) -> float | None:
        if self.hang_api is None or not self.hang_timeout:
            return None
        names = [n for n in self.local.procs if n not in self.local.ended]
        with contextlib.suppress(Exception):
            return float(self.hang_api["progress"](self.job_dir, names))
        return None

    def check_hang(self) -> None:
        if not self.is_leader or self.hang is not None or self.policy.verdict is not None:
            return
        progress = self.local_progress()
        if progress is None:
            return
        newest = max([progress, self.started_at, *self.progress.values()])
        idle = time.time() - newest
        if idle < float(self.hang_timeout or 0):
            return
        self.hang = {"at": time.time(), "idle_s": idle, "captured": []}
        self.event("hang", idle_s=idle)
        self.broadcast({"type": "capture"})
        self.capture()
        self.apply(self.policy.feed(HangSeen(time.time(), idle, self.stop_on_hang)))

    def capture(self) -> None:
        if self.hang_api is None:
            return
        procs = [
            {"name": n, "rank": (p.get("ranks") or [None])[0], "pgid": self.local.pgids.get(n)}
            for n, p in self.local.procs.items()
            if n not in self.local.ended
        ]
        try:
            result = self.hang_api["capture"](self.job_dir, procs)
        except Exception as exc:  # a capture must never take the supervisor down
            self.event("capture-failed", why=repr(exc))
            return
        captured = list((result or {}).get("captured") or [])
        self.event("capture", captured=captured)
        if self.hang is not None:
            self.hang["captured"] = self.hang["captured"] + captured
        self.dirty = True

    # -- the end -------------------------------------------------------------------------

    def maybe_finish(self) -> None:
        if not self.local.all_ended:
            return
        if self.is_leader:
            if not self.policy.over:
                return
            if self.ended_at is None:
                self.ended_at = time.time()
                self.event("final", state=self.policy.verdict, first_failure=self.first_failure())
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
        # Without the leader's final word only once the leader is lost for good.
        if (verdict is not None and verdict.get("final")) or self.leader_lost:
            if self.ended_at is None:
                self.ended_at = time.time()
                self.event("final", state=self.state(), first_failure=self.first_failure())
            self.finish()

    def finish(self) -> None:
        deadline = time.time() + 3.0
        while self.local.leftovers() and time.time() < deadline:
            self.local._signal(signal.SIGKILL)
            time.sleep(0.1)
        self.dirty = True
        self.write(force=True)
        self.done = True


def sv_hang_api() -> dict[str, Callable[..., Any]] | None:
    """hang_capture.py's functions when that part precedes this one in the source."""
    names = {"progress": "hang_last_progress", "capture": "hang_capture", "gpu": "hang_gpu_sample"}
    found = {key: globals().get(name) for key, name in names.items()}
    if not all(callable(f) for f in found.values()):
        return None
    return found  # type: ignore[return-value]


def supervisor_main() -> None:
    job_dir = os.path.abspath(sys.argv[1])
    supervisor = Supervisor(job_dir)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        supervisor.run()
    except Exception as exc:
        supervisor.event("supervisor-crashed", why=repr(exc))
        raise


if __name__ == "__main__":
    supervisor_main()
