"""The supervisor's part that drains a host whose GPU fails (ddp ``--min-hosts``).

On a follower of an elastic job, every ``SV_DRAIN_EVERY_S`` it reads its job's GPUs'
health with one ``nvidia-smi --query-gpu`` (bounded; nothing where no nvidia-smi
exists) and judges it with the console's ``fail`` rules for those fields
(console/probe/health.py: uncorrectable ECC errors since the last reset, a row remap
pending or failed, retired pages pending). The job's GPUs are the first as many as
the host runs ranks (each rank takes the device of its local rank). A failing GPU
drains the host: its processes are killed at once (KILL, as a crash: a torchrun agent
that gets TERM closes the job's rendezvous for every host on its way out), its own
ends read as asked for (not failures), and the leader hears ``drained`` with the
finding, which its policy takes as a lost host: a scale-down while ``--min-hosts``
remain, else the job's failure. The leader's own host is never drained here: its
agent holds the rendezvous, so the job cannot go on without it.

A part of the supervisor's single source (``supervisor/source.py``): standard library
only, Python >= 3.7, names prefixed ``sv_``/``Sv``/``SV_``.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import TYPE_CHECKING, Any

if __name__ != "__main__":  # imported by the console/tests; on a host the parts precede
    from console.hostprogs.jobctl.common import marked_pids
    from console.hostprogs.supervisor.policy import HostSilent

SV_DRAIN_EVERY_S = 2.0
SV_DRAIN_READ_S = 10.0  # an nvidia-smi slower than this: no verdict this time
SV_DRAIN_FIELDS = (
    "index",
    "ecc.errors.uncorrected.volatile.total",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "retired_pages.pending",
)


def sv_gpu_failures(rows: list[list[str]], gpus: int) -> list[str]:
    """``GPU 0: 2 uncorrectable ECC error(s) since the last reset`` for each failing
    finding on GPUs 0..gpus-1 (rows: ``SV_DRAIN_FIELDS`` values, as nvidia-smi prints)."""
    found = []
    for row in rows:
        if len(row) < len(SV_DRAIN_FIELDS) or not row[0].strip().isdigit():
            continue
        index = int(row[0])
        if index >= gpus:
            continue
        ecc, remap, remap_failed, retired = (cell.strip() for cell in row[1:5])
        if ecc.isdigit() and int(ecc) > 0:
            found.append(f"GPU {index}: {ecc} uncorrectable ECC error(s) since the last reset")
        if remap_failed == "Yes":
            found.append(f"GPU {index}: row remapping failed")
        if remap == "Yes":
            found.append(f"GPU {index}: row remap pending (reset the GPU)")
        if retired == "Yes":
            found.append(f"GPU {index}: retired pages pending (reset the GPU)")
    return found


def sv_job_environ(job_id: str) -> dict[str, str] | None:
    """The environment of one of the job's processes here: the host's setup line (PATH,
    the driver's tools) applies to them, not to the supervisor jobctl started."""
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
            return env
    return None


def sv_read_gpu_health(env: dict[str, str]) -> list[list[str]] | None:
    """Each GPU's ``SV_DRAIN_FIELDS`` read as the job sees its GPUs (its environment);
    None when there is no nvidia-smi or no answer."""
    tool = shutil.which("nvidia-smi", path=env.get("PATH"))
    if tool is None:
        return None
    try:
        done = subprocess.run(
            [tool, "--query-gpu=" + ",".join(SV_DRAIN_FIELDS), "--format=csv,noheader,nounits"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=SV_DRAIN_READ_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    text = done.stdout.decode(errors="replace")
    return [line.split(",") for line in text.splitlines() if line.strip()]


class SvDrain:
    """Mixed into the supervisor: a follower drains itself, the leader hears of it."""

    host: str
    job_id: str
    is_leader: bool
    cfg: dict[str, Any]
    policy: Any
    local: Any
    dirty: bool
    stop_asked_at: float | None
    remote_verdict: dict[str, Any] | None
    notifier: Any

    if TYPE_CHECKING:  # provided by the supervisor and its other parts

        def event(self, event: str, **details: Any) -> None: ...
        def send_leader(self, message: dict[str, Any]) -> None: ...
        def apply(self, stop_now: bool) -> None: ...

    def init_drain(self) -> None:
        mine = [p for p in self.cfg.get("processes") or () if p.get("host") == self.host]
        self.drain_gpus = sum(len(p.get("ranks") or ()) for p in mine)
        elastic = self.cfg.get("kind") == "ddp" and int(self.cfg.get("min_hosts") or 0) > 0
        self.drain_on = elastic and not self.is_leader and self.drain_gpus > 0
        self.drained: dict[str, Any] | None = None
        self.last_drain_check = 0.0

    def check_drain(self) -> None:
        """Every SV_DRAIN_EVERY_S on an elastic job's follower: drain on a failing GPU."""
        now = time.time()
        if (
            not self.drain_on
            or self.drained is not None
            or now - self.last_drain_check < (SV_DRAIN_EVERY_S)
        ):
            return
        self.last_drain_check = now
        if self.local.term_at is not None or self.remote_verdict is not None:
            return  # stopping anyway
        env = sv_job_environ(self.job_id)
        rows = sv_read_gpu_health(env) if env is not None else None
        found = sv_gpu_failures(rows, self.drain_gpus) if rows else []
        if found:
            self.drain("; ".join(found))

    def drain(self, why: str) -> None:
        self.drained = {"at": time.time(), "why": why}
        # Its processes' ends are asked for, not failures (the policy reads stopped).
        self.stop_asked_at = self.drained["at"]
        self.event("drained", why=why)
        self.send_leader({"type": "drained", "why": why})  # before the ends it causes
        self.local.kill()
        self.dirty = True

    def from_follower_drained(self, host: str, message: dict[str, Any]) -> None:
        """The leader: ``host`` drained itself; a lost host to the policy."""
        why = str(message.get("why") or "a GPU failed")
        self.event("host-drained", peer=host, why=why)
        self.notifier.notify("drained", "running", why, host)
        self.apply(self.policy.feed(HostSilent(host, f"drained: {why}", time.time())))
