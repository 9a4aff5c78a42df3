"""What the console knows about the cluster right now, in one place per app.

The app's workers are the only writers (through the app's ``apply_*`` methods); every
screen reads from here instead of from another screen. Each ``apply_*`` keeps only what
changed and returns it, so the app hands screens the batch to redraw.

Hosts known only from Slurm: the squeue poller (``jobs/slurm/queue.py``) keys a node no
inventory host maps to by its own Slurm name; the store keeps such a node as a host
(:attr:`ClusterStore.slurm_hosts`, tagged :data:`SLURM_ONLY_TAG`) once a job holds it,
and the GPU screen draws it like an inventory host (``screens/cluster_slurm.py``). The
console has no SSH connection to it: its figures come through ``srun`` while one of the
user's own jobs holds it (``probe/srun_sampler.py``), else its Slurm jobs are all it
shows. It stays after its jobs leave (its view then says so), as an inventory host would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import ValidationError

from console.inventory import Host
from console.jobs.slurm.queue import SlurmJobOnNode
from console.probe.models import HostView
from console.transport.base import HostState, HostStatus
from console.ui.gpu_history import GpuHistory
from console.ui.jobs_service import JobRow

SLURM_ONLY_TAG = "slurm-only"
# Its view until srun samples it: no SSH connection, so no figures of its own.
SLURM_ONLY_REASON = "not in the inventory: known from Slurm only (figures via srun in your job)"


def slurm_only_host(node: str) -> Host | None:
    """A host for Slurm node ``node`` (its name and address), None when the name is no
    valid host name (it could not be drawn or filtered safely)."""
    try:
        return Host(name=node, address=node, tags=(SLURM_ONLY_TAG,))
    except ValidationError:
        return None


class ClusterStore:
    def __init__(self, hosts: Iterable[str]) -> None:
        # Only the inventory's hosts (and those known from Slurm alone, below): a stray
        # name from a feed is dropped, not shown.
        self.hosts = frozenset(hosts)
        # Slurm nodes no inventory host maps to, in the order they were first seen held
        # by a job (above); kept once seen, as an inventory host is.
        self.slurm_hosts: dict[str, Host] = {}
        self.statuses: dict[str, HostStatus] = {}  # connection state per host
        self.views: dict[str, HostView] = {}  # latest GPU/host sample per host
        self.jobs: dict[str, JobRow] = {}  # one row per job of this inventory
        self.history = GpuHistory()  # each GPU's recent figures (the host detail plots)
        # Slurm jobs per host (every user's; from the login host's squeue), if any.
        self.slurm: dict[str, tuple[SlurmJobOnNode, ...]] = {}

    def apply_statuses(self, statuses: Iterable[HostStatus]) -> dict[str, HostStatus]:
        """Take a batch (latest per host wins); returns the hosts whose status changed."""
        latest = {s.name: s for s in statuses if s.name in self.hosts}
        changed = {n: s for n, s in latest.items() if self.statuses.get(n) != s}
        self.statuses.update(changed)
        return changed

    def apply_views(self, batches: Iterable[Mapping[str, HostView]]) -> dict[str, HostView]:
        """Take batches of host views (later batches win); returns the merged batch."""
        merged: dict[str, HostView] = {}
        for batch in batches:
            merged.update((name, view) for name, view in batch.items() if self.knows(name))
        self.views.update(merged)
        self.history.add(merged)
        return merged

    def apply_jobs(self, rows: Iterable[JobRow]) -> list[JobRow]:
        """Take job rows (new or changed); returns those that differ from what was known."""
        changed = [row for row in rows if self.jobs.get(row.id) != row]
        self.jobs.update((row.id, row) for row in changed)
        return changed

    def apply_slurm(
        self, occupancy: Mapping[str, tuple[SlurmJobOnNode, ...]]
    ) -> dict[str, tuple[SlurmJobOnNode, ...]]:
        """Take the whole Slurm occupancy (a host not named holds no Slurm job);
        returns the hosts whose jobs changed, ``()`` for those freed. Kept in place:
        the GPU grid reads this dict. A node no inventory host maps to becomes a host
        known only from Slurm (:attr:`slurm_hosts`) the first time a job holds it."""
        for name, jobs in occupancy.items():
            if jobs and name not in self.hosts and name not in self.slurm_hosts:
                host = slurm_only_host(name)
                if host is not None:
                    self.slurm_hosts[name] = host
                    self.views.setdefault(name, HostView(name, HostState.DOWN, SLURM_ONLY_REASON))
        latest = {n: jobs for n, jobs in occupancy.items() if self.knows(n) and jobs}
        changed = {
            n: latest.get(n, ())
            for n in {*latest, *self.slurm}
            if latest.get(n, ()) != self.slurm.get(n, ())
        }
        self.slurm.clear()
        self.slurm.update(latest)
        return changed

    def knows(self, name: str) -> bool:
        """An inventory host, or a node known only from Slurm."""
        return name in self.hosts or name in self.slurm_hosts

    def is_up(self, host: str) -> bool:
        status = self.statuses.get(host)
        return status is not None and status.is_up
