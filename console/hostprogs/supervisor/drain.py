"""The supervisor's part that drains a host whose GPU fails (ddp ``--min-hosts``).

On a follower of an elastic job it watches its job's GPUs with the console's own health
reading and ``fail`` rules, shipped in this single source (``sampler/health.py``'s
readers, ``sampler/health_rules.py``'s rules, the ones ``distconsole health`` judges
with): ``NvsmiHealth``, one bounded ``nvidia-smi --query-gpu`` of the health fields every
``SV_DRAIN_EVERY_S`` in a thread of its own, run as the job's processes see it (their
environment: the host's setup line puts the driver's tools on PATH), and ``KernelXids``,
``/dev/kmsg`` read without blocking (else ``journalctl -k`` in a thread) from the job's
start. A GPU fails on uncorrectable ECC errors since the last reset, a row remap pending
or failed, retired pages pending, a recovery action other than none, or a critical Xid
on its PCI address since the job started; the host fails when nvidia-smi has not
answered within ``SV_DRAIN_READ_S`` (it is killed or left, never waited on, and the
check itself never waits: it reads what the threads last saw).

Only the job's GPUs count: CUDA_VISIBLE_DEVICES of the job's processes here (indices or
GPU UUIDs; every GPU when none sets it, or when it names something else, a MIG
instance). A failing GPU the job does not use is no drain: the supervisor's events say
so once (``gpu-unhealthy-not-used``).

A failing GPU drains the host: its processes are killed at once (KILL, as a crash: a
torchrun agent that gets TERM closes the job's rendezvous for every host on its way
out), its own ends read as asked for (not failures), and the leader hears ``drained``
with the finding in words ("GPU 1: Xid 79 (GPU has fallen off the bus) at 12:03:11"),
which it notifies and its policy takes as a lost host: a scale-down while
``--min-hosts`` remain, else the job's failure. The leader's own host is never drained
here: its agent holds the rendezvous, so the job cannot go on without it.

A part of the supervisor's single source (``supervisor/source.py``): standard library
only, Python >= 3.7, names prefixed ``sv_``/``Sv``/``SV_``.
"""

from __future__ import annotations

import shutil
import time
from typing import TYPE_CHECKING, Any

if __name__ != "__main__":  # imported by the console/tests; on a host the parts precede
    from console.hostprogs.jobctl.common import marked_pids
    from console.hostprogs.sampler.health import KernelXids, NvsmiHealth
    from console.hostprogs.sampler.health_rules import (
        cell_text,
        gpu_fail_reasons,
        pci_key,
        reader_hung,
        xid_fails,
        xid_words,
    )
    from console.hostprogs.sampler.schema import HEALTH_FIELDS
    from console.hostprogs.supervisor.policy import HostSilent

SV_DRAIN_EVERY_S = 2.0
SV_DRAIN_READ_S = 10.0  # an nvidia-smi that has not answered in this long: the host fails
SV_KMSG = "/dev/kmsg"
SV_VISIBLE = "CUDA_VISIBLE_DEVICES"


def sv_job_environs(job_id: str) -> list[dict[str, str]]:
    """The environments of the job's processes here: the host's setup line (PATH, the
    driver's tools) and the job's env (CUDA_VISIBLE_DEVICES) apply to them, not to the
    supervisor jobctl started."""
    out = []
    for pid in marked_pids(job_id):
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                raw = handle.read()
        except OSError:
            continue
        env = {}
        for entry in raw.split(b"\0"):
            name, sep, value = entry.partition(b"=")
            if sep:
                env[name.decode(errors="replace")] = value.decode(errors="replace")
        if env:
            out.append(env)
    return out


def sv_visible(environs: list[dict[str, str]]) -> list[str] | None:
    """The CUDA_VISIBLE_DEVICES entries the job's processes name (together); None when
    none of them sets it (they see every GPU)."""
    found = None
    for env in environs:
        value = env.get(SV_VISIBLE)
        if value is None:
            continue
        found = found or []
        for cell in value.split(","):
            if cell.strip() and cell.strip() not in found:
                found.append(cell.strip())
    return found


def sv_health_rows(fields: list[str], rows: list[str]) -> list[dict[str, Any]]:
    """nvidia-smi's ``--query-gpu`` CSV rows as HEALTH_FIELDS records (ints, "Yes"/"No",
    words; None where not reported) plus ``uuid`` when asked for."""
    by_query = {query: (attr, kind) for attr, kind, query in HEALTH_FIELDS if query}
    by_query["uuid"] = ("uuid", "str")
    out = []
    for row in rows:
        record: dict[str, Any] = {}
        for field, cell in zip(fields, row.split(",")):  # noqa: B905 (Python < 3.10 here)
            attr, kind = by_query.get(field, (None, None))
            text = cell_text(cell)
            if attr is None:
                continue
            if kind == "int":
                record[attr] = int(text) if text is not None and text.isdigit() else None
            else:
                record[attr] = text
        if isinstance(record.get("index"), int):
            out.append(record)
    return out


def sv_used_gpus(visible: list[str] | None, gpus: list[dict[str, Any]]) -> set[int] | None:
    """The GPU indices the job uses, from CUDA_VISIBLE_DEVICES' entries (an index, or a
    GPU UUID or its unique prefix); None: every GPU (unset, or an entry named otherwise)."""
    if visible is None:
        return None
    used = set()
    for cell in visible:
        if cell.lstrip("-").isdigit():
            if int(cell) < 0:
                break  # CUDA stops at an invalid index: nothing after it is visible
            used.add(int(cell))
            continue
        named = [g["index"] for g in gpus if str(g.get("uuid") or "").startswith(cell)]
        if not cell.startswith("GPU-") or len(named) != 1:
            return None  # a MIG instance, an unknown UUID: judge every GPU
        used.add(named[0])
    return used


class SvGpuWatch:
    """A host's GPU health as the drain reads it: the health readers' threads run on
    their own; :meth:`check` only reads what they last saw (it never waits)."""

    def __init__(
        self,
        env: dict[str, str] | None,
        since: float,
        every: float = SV_DRAIN_EVERY_S,
        bound: float = SV_DRAIN_READ_S,
        kmsg: str = SV_KMSG,
    ) -> None:
        self.since = since  # the job's start: Xids before it are not the job's
        self.reader = NvsmiHealth(every, bound, env=env, extra=("uuid",))
        self.xids = KernelXids(kmsg=kmsg, since=since)

    def stop(self) -> None:
        self.reader.stop()

    def check(
        self, visible: list[str] | None, now: float | None = None
    ) -> tuple[list[str], dict[int, list[str]]]:
        """(the failures that drain the host, each in words; the failing GPUs the job
        does not use, with their reasons)."""
        now = time.time() if now is None else now
        reading, error, _since = self.reader.latest()
        drain: list[str] = []
        if reader_hung(error):
            drain.append(f"host: {error}")
        gpus = sv_health_rows(reading[1], reading[2]) if reading is not None else []
        used = sv_used_gpus(visible, gpus)
        found: dict[int, list[str]] = {}
        for gpu in gpus:
            for _key, why in gpu_fail_reasons(gpu.get):
                found.setdefault(gpu["index"], []).append(why)
        by_pci = {pci_key(g.get("pci_bus_id")): g["index"] for g in gpus}
        for x in self.xids.poll():
            when, xid = float(str(x.get("t") or 0)), int(str(x.get("xid") or 0))
            index = by_pci.get(pci_key(str(x.get("pci") or "")))
            if index is None or when < self.since or not xid_fails(xid, when, now):
                continue  # on no GPU here (the health verdict only warns), or before the job
            stamp = time.strftime("%H:%M:%S", time.localtime(when))
            why = f"{xid_words(xid)} at {stamp}"
            if why not in found.get(index, ()):
                found.setdefault(index, []).append(why)
        others: dict[int, list[str]] = {}
        for index, reasons in sorted(found.items()):
            if used is None or index in used:
                drain += [f"GPU {index}: {why}" for why in reasons]
            else:
                others[index] = reasons
        return drain, others


class SvDrain:
    """Mixed into the supervisor: a follower drains itself, the leader hears of it."""

    host: str
    job_id: str
    is_leader: bool
    cfg: dict[str, Any]
    policy: Any
    local: Any
    dirty: bool
    started_at: float
    stop_asked_at: float | None
    remote_verdict: dict[str, Any] | None
    notifier: Any

    if TYPE_CHECKING:  # provided by the supervisor and its other parts

        def event(self, event: str, **details: Any) -> None: ...
        def send_leader(self, message: dict[str, Any]) -> None: ...
        def apply(self, stop_now: bool) -> None: ...

    def init_drain(self) -> None:
        mine = [p for p in self.cfg.get("processes") or () if p.get("host") == self.host]
        ranks = sum(len(p.get("ranks") or ()) for p in mine)
        elastic = self.cfg.get("kind") == "ddp" and int(self.cfg.get("min_hosts") or 0) > 0
        self.drain_on = elastic and not self.is_leader and ranks > 0
        self.drained: dict[str, Any] | None = None
        self.last_drain_check = 0.0
        self.gpu_watch: SvGpuWatch | None = None
        self.gpu_watch_off = False  # no GPU tools here (the leader may still drain it)
        self.told_not_used: set = set()

    def check_drain(self) -> None:
        """Every SV_DRAIN_EVERY_S on an elastic job's follower: drain on a failing GPU."""
        now = time.time()
        if (
            not self.drain_on
            or self.gpu_watch_off
            or self.drained is not None
            or now - self.last_drain_check < SV_DRAIN_EVERY_S
        ):
            return
        self.last_drain_check = now
        if self.local.term_at is not None or self.remote_verdict is not None:
            return  # stopping anyway
        environs = sv_job_environs(self.job_id)
        if self.gpu_watch is None:
            if not environs:
                return  # the job's processes are not there yet
            env = next((e for e in environs if SV_VISIBLE in e), environs[0])
            if shutil.which("nvidia-smi", path=env.get("PATH")) is None:
                # No GPU tools here: nothing to read. Not drain_on: the leader's
                # --exclude-slow may still drain this host (pace/hook.py).
                self.gpu_watch_off = True
                return
            self.gpu_watch = SvGpuWatch(env, self.started_at)
        drain, others = self.gpu_watch.check(sv_visible(environs), now)
        for index, reasons in others.items():
            if index not in self.told_not_used:
                self.told_not_used.add(index)
                self.event("gpu-unhealthy-not-used", gpu=index, why="; ".join(reasons))
        if drain:
            self.drain("; ".join(drain))

    def drain(self, why: str) -> None:
        self.drained = {"at": time.time(), "why": why}
        # Its processes' ends are asked for, not failures (the policy reads stopped).
        self.stop_asked_at = self.drained["at"]
        self.event("drained", why=why)
        self.send_leader({"type": "drained", "why": why})  # before the ends it causes
        self.local.kill()
        self.dirty = True
        if self.gpu_watch is not None:
            self.gpu_watch.stop()

    def from_follower_drained(self, host: str, message: dict[str, Any]) -> None:
        """The leader: ``host`` drained itself; a lost host to the policy."""
        why = str(message.get("why") or "a GPU failed")
        self.event("host-drained", peer=host, why=why)
        self.notifier.notify("drained", "running", why, host)
        self.apply(self.policy.feed(HostSilent(host, f"drained: {why}", time.time())))
