"""Messages that flow up: workers to the app, screens to the app ("messages up").

The app hands what arrived down to screens as batches ("attributes down").
"""

from __future__ import annotations

from textual.message import Message


class HostStatusesArrived(Message):
    """New host statuses are waiting in the app's batch; the handler takes all of them."""


class HostViewsArrived(Message):
    """New GPU/host samples (batches of HostView per host) are waiting in the app's inbox."""


class JobRowsArrived(Message):
    """Changed job rows are waiting in the app's inbox."""


class SlurmOccupancyArrived(Message):
    """A new Slurm occupancy (jobs per host, from squeue) is waiting in the app's inbox."""


class OpenLogs(Message):
    """A screen asks the app to open the logs of a job."""

    def __init__(self, job_id: str) -> None:
        super().__init__()
        self.job_id = job_id
