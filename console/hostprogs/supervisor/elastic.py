"""The supervisor's part for elastic membership (``--min-hosts M``, the leader only):
ddp's, and Horovod elastic's (at the end).

torchrun runs ``--nnodes M:N``: when a host is lost, the survivors' agents restart their
workers and meet again without it. The policy (``JobPolicy`` with ``min_hosts``) takes a
lost host as a **scale-down** while at least M hosts remain, and fails the job below M
or when the lost host is the first one (its agent holds the rendezvous: the survivors
cannot meet without it).

A host is lost when its supervisor goes silent (heartbeats stop without a close) or the
console says so (``lost-hosts/HOST``): ``peers.py`` feeds those. A host killed whole on a
kernel that lives on (a crash of the host's user's processes, as the tests do) closes
its supervisor's connection instead, which alone reads *unsupervised* (its training may
run on). Here that doubt is settled by torchrun itself: this (the leader's) host's
workers carry the round they belong to (``GROUP_WORLD_SIZE``: agents in the round,
``TORCHELASTIC_RESTART_COUNT``). Once a round holds no more agents than the hosts whose
supervisors are still connected, every unsupervised host was left out of it: lost.

Spares (``--spare-hosts``: a ddp launch with no planned ranks) run a torchrun agent of
the same rendezvous, gated (``SV_SPARE_GATE``) until the leader sends ``spare-go``: only
once a host was lost (a scale-down no spare has made up for yet), one spare per lost
host. Not before: torch's redundancy list holds an agent only while the round is full,
so on any restart (a crashed rank, no host lost) a waiting spare moved to the wait list
and raced the job's own agents into the next round; one agent too many was always left
in the wait list of a full round, and every participant restarted its workers for it
again, every 1.5-3 s, for ever. Started after the loss, the spare's agent finds a round
of the survivors, waits, and they restart their workers once more to take it in. A
spare's supervisor sees its agent's workers start (it joined a round) and sends
``spare-joined``: the leader's policy counts it in ``hosts_now`` and writes a
``spare-joined`` event.

Horovod elastic (``jobs/plan/horovod_elastic.py``): one supervisor, the launcher
host's; the other hosts run no process of the job (horovodrun's ssh starts the workers),
so no supervisor there can go silent or close its connection. The hosts come from
``horovod-hosts.json`` (the policy's ``member_hosts``). A host is lost when the console
says so (``lost-hosts/HOST``, ``peers.py``), or, the analogue of torchrun's round, when
Horovod's driver itself reports a worker there failed (``record state: H[s] = FAILURE``,
``blacklist failing host: H``: horovodrun-0's INFO log, read as it grows) and ssh from
this host, as Horovod's own (its options, the job's port), cannot reach it (ssh's own
status 255: refused, timed out, no route): Horovod could not start a worker there again.
It leaves ``hosts_now``, which the discovery script prints, so Horovod goes on with the
others instead of trying the host again after each cooldown; that drop is no restart.
A host ssh reaches had a plain worker failure: a restart (``restart.py``).

A part of the supervisor's single source (``supervisor/source.py``): standard library
only, Python >= 3.7, names prefixed ``sv_``/``Sv``/``SV_``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from typing import TYPE_CHECKING, Any

if __name__ != "__main__":  # imported by the console/tests; on a host the parts precede
    from console.hostprogs.jobctl.common import read_text
    from console.hostprogs.supervisor.rendezvous import SvRendezvous
    from console.hostprogs.supervisor.restart import SV_HOROVOD_DROPPED, SV_HOROVOD_ROLE
    from console.hostprogs.supervisor.rounds import sv_stop_stale_workers, sv_torchrun_round

SV_SPARE_GATE = "spare-go"  # + ".HOST" in the job directory (jobs/plan/ddp.py)
SV_HOROVOD_HOSTS = "horovod-hosts.json"  # jobs/plan/horovod_elastic.py HOSTS_FILE
SV_HOROVOD_FAILED = re.compile(r"record state: (\S+)\[\d+\] = FAILURE")
SV_SSH_PROBE_S = 5  # ssh's ConnectTimeout when asking whether a host is reachable
SV_READ_CHUNK = 1 << 20  # of a growing log, at most this much per read


class SvLogLines:
    """New complete lines of some files, each read from where the last read ended."""

    def __init__(self, paths: list[str]) -> None:
        self.at = dict.fromkeys(paths, 0)
        self.rest = dict.fromkeys(paths, b"")

    def lines(self) -> list[str]:
        found: list[str] = []
        for path, at in self.at.items():
            try:
                with open(path, "rb") as handle:
                    handle.seek(0, os.SEEK_END)
                    if handle.tell() < at:  # written anew
                        at, self.rest[path] = 0, b""
                    handle.seek(at)
                    data = handle.read(SV_READ_CHUNK)
            except OSError:
                continue
            self.at[path] = at + len(data)
            *done, self.rest[path] = (self.rest[path] + data).split(b"\n")
            found += [line.decode(errors="replace") for line in done]
        return found


def sv_horovod_failed_host(line: str) -> str | None:
    """Horovod's name of the host whose worker failed, or that it dropped, on ``line``."""
    for pattern in (SV_HOROVOD_FAILED, SV_HOROVOD_DROPPED):
        match = pattern.search(line)
        if match:
            return match.group(1)
    return None


def sv_ssh_probe(name: str, port: Any) -> subprocess.Popen[bytes]:
    """``ssh NAME true`` as horovodrun runs its ssh (its options, the job's port), never
    prompting; its status 255 says ssh itself could not reach the host."""
    argv = ["ssh", "-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no"]
    argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={SV_SSH_PROBE_S}"]
    if port:
        argv += ["-p", str(port)]
    return subprocess.Popen(
        [*argv, name, "true"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


class SvElastic(SvRendezvous):
    """Mixed into the supervisor: scale-downs seen, and unsupervised hosts settled."""

    host: str
    is_leader: bool
    cfg: dict[str, Any]
    policy: Any
    local: Any
    peers: list[Any]
    unsupervised: dict[str, dict[str, Any]]
    dirty: bool
    job_dir: str
    notifier: Any  # the leader's (notify.py): --notify-on scaled-down, replaced

    if TYPE_CHECKING:  # provided by the supervisor and its other parts

        def event(self, event: str, **details: Any) -> None: ...
        def silent(self, host: str, reason: str) -> None: ...
        def send_leader(self, message: dict[str, Any]) -> None: ...
        def pack(self, message: dict[str, Any]) -> bytes: ...

    def init_elastic(self) -> None:
        self.scale_downs_told = 0
        self.joins_told = 0
        self.joined_told = False  # a spare's: the leader heard it joined
        self.last_round: tuple[int, int] | None = None
        spares = [
            str(p["host"])
            for p in self.cfg.get("processes") or ()
            if self.cfg.get("kind") == "ddp" and p.get("role") == "torchrun" and not p.get("ranks")
        ]
        self.spares = list(dict.fromkeys(spares))
        self.policy.spare_hosts = list(self.spares)
        if self.is_leader and self.cfg.get("kind") == "ddp":
            self.policy.min_hosts = int(self.cfg.get("min_hosts") or 0)
            self.policy.master_host = self.host  # node rank 0: its agent holds the rendezvous
        # Horovod elastic with --min-hosts (the leader is the launcher host): its hosts
        # once horovod-hosts.json is read (horovod_watch); Horovod's name -> inventory name.
        launchers = [
            str(p["name"])
            for p in self.cfg.get("processes") or ()
            if p.get("host") == self.host and p.get("role") == SV_HOROVOD_ROLE
        ]
        self.horovod_on = bool(
            self.is_leader and launchers and int(self.cfg.get("min_hosts") or 0) > 0
        )
        self.horovod_names: dict[str, str] = {}
        self.horovod_port: Any = None
        self.horovod_log = SvLogLines(
            [os.path.join(self.job_dir, n + x) for n in launchers for x in (".err", ".out")]
        )
        # inventory name -> (ssh probe, what Horovod said, when): a failed worker's host
        self.horovod_probes: dict[str, tuple[subprocess.Popen[bytes], str, float]] = {}
        self.init_rendezvous()  # rendezvous.py: --rendezvous-host

    def spare_go(self) -> None:
        """The leader says the first round formed: this spare's agent may start."""
        if self.host not in self.spares:
            return
        gate = os.path.join(self.job_dir, SV_SPARE_GATE + "." + self.host)
        if not os.path.exists(gate):
            with open(gate, "w") as handle:
                handle.write("go\n")
            self.event("spare-started")

    def check_spare(self) -> None:
        """A spare's supervisor, each heartbeat: once its agent's workers run, it joined
        a round; the leader is told (again, until it was connected to hear it)."""
        if self.joined_told or self.host not in self.spares:
            return
        if self.host not in self.policy.joined:
            for name in self.local.procs:
                group = self.local.pgids.get(name)
                found = sv_torchrun_round(group) if group else None
                if found is not None:
                    self.policy.spare_joined(self.host, time.time())
                    self.event("spare-joined", restart=found[0], agents=found[1])
                    self.dirty = True
                    break
        if self.host in self.policy.joined and getattr(self, "leader", None) is not None:
            self.send_leader({"type": "spare-joined"})
            self.joined_told = True

    def from_spare_joined(self, host: str) -> None:
        if self.is_leader and self.policy.spare_joined(host, time.time()):
            self.dirty = True

    def tell_spares(self) -> None:
        """The leader: ``spare-go`` to as many waiting spares (in plan order, connected)
        as lost hosts no spare replaced yet (see the module doc: never for a restart);
        an event for each spare that joined."""
        wanted = len(self.policy.scale_downs) - len(self.policy.joins)
        if wanted > 0 and self.policy.verdict is None:
            data = self.pack({"type": "spare-go"})
            connected = {p.host: p for p in self.peers if p.host is not None}
            waiting = [h for h in self.spares if self.policy.waiting_spare(h) and h in connected]
            for host in waiting[:wanted]:
                connected[host].send(data)
        for join in self.policy.joins[self.joins_told :]:
            self.joins_told += 1
            details = {k: v for k, v in join.items() if k != "host"}
            self.event("spare-joined", peer=join["host"], **details)
            self.dirty = True
            now = len(join.get("hosts_now") or ())
            why = f"spare {join['host']} joined: {now} of {len(self.policy.hosts)} hosts"
            self.notifier.notify("replaced", self.policy.state, why, str(join["host"]))

    def check_membership(self) -> None:
        """Each heartbeat, on an elastic job's leader: torchrun's round, the unsupervised
        hosts it left out, and the scale-downs the policy made (events)."""
        if not self.is_leader:
            self.check_spare()
            self.check_rendezvous()  # rendezvous.py: the leader's connection closed
        if (
            not (self.is_leader and self.policy.min_hosts)
            or self.policy.verdict is not None
            or self.horovod_on
        ):
            self.tell_scale_downs()
            return
        for name in self.local.procs:
            group = self.local.pgids.get(name)
            found = sv_torchrun_round(group) if group else None
            if found is not None and found != self.last_round:
                self.last_round = found
                self.event("torchrun-round", restart=found[0], agents=found[1])
        found = self.store_round()  # a leader on the rendezvous host: the store's round
        if found is not None and found != self.last_round:
            self.last_round = found
            self.event("rendezvous-round", round=found[0], agents=found[1])
        doubtful = [h for h in sorted(self.unsupervised) if h in self.policy.hosts_now]
        if self.last_round is not None and doubtful:
            connected = {p.host for p in self.peers if p.host is not None} | {self.host}
            agents = self.last_round[1]
            if agents <= len(connected & set(self.policy.hosts_now)):
                for host in doubtful:
                    self.unsupervised.pop(host, None)
                    self.silent(
                        host,
                        f"host lost: its supervisor's connection closed, and torchrun's "
                        f"next round went on with {agents} of {len(self.policy.hosts)} hosts "
                        "without it",
                    )
        self.tell_spares()
        self.tell_scale_downs()

    def tell_scale_downs(self) -> None:
        """One ``scaled-down`` event per scale-down the policy made, with its cause."""
        for down in self.policy.scale_downs[self.scale_downs_told :]:
            self.scale_downs_told += 1
            details = {k: v for k, v in down.items() if k != "host"}
            self.event("scaled-down", peer=down["host"], **details)  # "host": the writer
            self.dirty = True
            left = f"{len(down.get('hosts_now') or ())} of {down.get('hosts_total')} hosts"
            why = f"{down['host']} left ({down.get('cause')}); {left} went on"
            self.notifier.notify("scaled-down", self.policy.state, why, str(down["host"]))
            lost = {"type": "member-lost", "host": down["host"], "hosts_now": down["hosts_now"]}
            for peer in self.peers if self.is_leader else ():
                if peer.host is not None:
                    peer.send(self.pack(lost))  # each survivor stops its stale workers too
            self.regroup(str(down["host"]), list(down.get("hosts_now") or ()))

    def regroup(self, lost: str, hosts_now: list[str]) -> None:
        """ddp: this host's workers still in a round with ``lost`` get SIGTERM, so that
        torchrun meets again without it now (rounds.py)."""
        if self.cfg.get("kind") != "ddp":
            return
        groups = [g for g in (self.local.pgids.get(n) for n in self.local.procs) if g]
        stopped = sv_stop_stale_workers(groups, len(hosts_now))
        if stopped:
            self.event("workers-stopped", peer=lost, pids=stopped, hosts_now=hosts_now)
            self.dirty = True

    def elastic_record(self) -> dict[str, Any]:
        """Membership for ``supervisor.json`` (an elastic job's leader only)."""
        if not self.policy.min_hosts:
            return {}
        return {
            "min_hosts": self.policy.min_hosts,
            "hosts_now": list(self.policy.hosts_now),
            "hosts_total": len(self.policy.hosts),
            "scale_downs": list(self.policy.scale_downs),
            "spare_hosts": list(self.policy.spare_hosts),
            "joins": list(self.policy.joins),
            "elastic_round": list(self.last_round) if self.last_round else None,
            "membership_at": time.time(),
        }

    # -- Horovod elastic (see the module doc) ------------------------------------------

    def remote_member(self, host: str) -> bool:
        """A host of the job with no supervisor of its own, still in it (Horovod's)."""
        return (
            host != self.host
            and host in self.policy.member_hosts
            and (host in self.policy.hosts_now)
        )

    def horovod_dropped(self) -> set:
        """Horovod's names of hosts whose drops are no restart: lost, or being asked."""
        out = set(self.horovod_probes)
        out |= {h for h in self.policy.member_hosts if h not in self.policy.hosts_now}
        return {n for n, host in self.horovod_names.items() if host in out}

    def horovod_hosts(self) -> bool:
        """The job's hosts from horovod-hosts.json (written as horovodrun starts)."""
        if self.horovod_names:
            return True
        try:
            found = json.loads(read_text(os.path.join(self.job_dir, SV_HOROVOD_HOSTS)) or "")
            hosts = [(str(h["name"]), str(h["horovod"])) for h in found["hosts"]]
        except (ValueError, KeyError, TypeError):
            return False
        self.horovod_names = {horovod: name for name, horovod in hosts}
        self.horovod_port = found.get("ssh_port")
        self.policy.member_hosts = [name for name, _ in hosts]
        self.policy.min_hosts = int(self.cfg.get("min_hosts") or 0)
        self.policy.master_host = self.host  # horovodrun's driver: the job's rendezvous
        self.event("horovod-hosts", hosts=self.policy.member_hosts, min_hosts=self.policy.min_hosts)
        self.dirty = True
        return True

    def horovod_watch(self) -> None:
        """Each loop, on a Horovod elastic leader with --min-hosts: Horovod's new log lines
        (a failed worker's host is asked over ssh) and the answers (a lost host)."""
        if not self.horovod_on or not self.horovod_hosts():
            return
        for line in self.horovod_log.lines():
            host = self.horovod_names.get(sv_horovod_failed_host(line) or "")
            if host is None or host in self.horovod_probes or not self.remote_member(host):
                continue
            if self.policy.verdict is None:
                name = next(n for n, h in self.horovod_names.items() if h == host)
                try:
                    probe = sv_ssh_probe(name, self.horovod_port)
                except OSError as exc:  # no ssh here: nothing says the host is gone
                    self.event("horovod-host-asked", peer=host, said=line.strip(), why=str(exc))
                    continue
                self.horovod_probes[host] = (probe, line.strip()[-200:], time.time())
        for host, (probe, said, since) in list(self.horovod_probes.items()):
            late = time.time() - since > 3 * SV_SSH_PROBE_S  # connected, nothing answers
            if probe.poll() is None and not late:
                continue
            del self.horovod_probes[host]
            if late:
                probe.kill()
            error = (probe.communicate()[1] or b"").decode(errors="replace").strip()
            why = error.splitlines()[-1] if error else f"exit status {probe.returncode}"
            if late:
                why = f"no answer in {3 * SV_SSH_PROBE_S} s"
            status = 255 if late else probe.returncode
            self.event("horovod-host-asked", peer=host, said=said, ssh=status, why=why)
            self.dirty = True
            if status == 255 and self.remote_member(host):
                self.silent(
                    host,
                    f"host lost: Horovod's worker there failed ({said}) and ssh from "
                    f"{self.host} cannot reach it ({why})",
                )
