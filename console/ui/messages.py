"""Messages workers post to the app ("messages up"); the app hands batches down to screens."""

from __future__ import annotations

from textual.message import Message


class HostStatusesArrived(Message):
    """New host statuses are waiting in the app's batch; the handler takes all of them."""


class HostViewsArrived(Message):
    """New GPU/host samples (batches of HostView per host) are waiting in the app's inbox."""
