"""What the console knows about the cluster right now, in one place per app.

The app's workers are the only writers (through the app's ``apply_*`` methods); every
screen reads from here instead of from another screen. Each ``apply_*`` keeps only what
changed and returns it, so the app hands screens the batch to redraw.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from console.jobs.slurm.queue import SlurmJobOnNode
from console.probe.models import HostView
from console.transport.base import HostStatus
from console.ui.gpu_history import GpuHistory
from console.ui.jobs_service import JobRow


class ClusterStore:
    def __init__(self, hosts: Iterable[str]) -> None:
        # Only the inventory's hosts: a stray name from a feed is dropped, not shown.
        self.hosts = frozenset(hosts)
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
            merged.update((name, view) for name, view in batch.items() if name in self.hosts)
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
        the GPU grid reads this dict."""
        latest = {n: jobs for n, jobs in occupancy.items() if n in self.hosts and jobs}
        changed = {
            n: latest.get(n, ())
            for n in {*latest, *self.slurm}
            if latest.get(n, ()) != self.slurm.get(n, ())
        }
        self.slurm.clear()
        self.slurm.update(latest)
        return changed

    def is_up(self, host: str) -> bool:
        status = self.statuses.get(host)
        return status is not None and status.is_up
