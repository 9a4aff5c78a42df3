"""The app's composition root: everything screens use, made once by the app.

Screens get this object in their constructor and never look things up on the app.
``connections``, ``monitor`` and ``jobs`` are set by the app's workers once the
cluster's connections exist; until then (and in views without connections) they are
None, and a screen says so instead of acting.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from console.inventory import Inventory
from console.settings import Settings
from console.ui.feeds import HostStatusSource
from console.ui.jobs_service import JobsService
from console.ui.store import ClusterStore

if TYPE_CHECKING:
    from console.probe.monitor import ClusterMonitor
    from console.transport.forward import PortForwards


@dataclass(frozen=True, slots=True)
class LaunchDraft:
    """What the launch form held when last seen: the next form opens with it, so Esc
    (or a failed pre-flight) never throws away what was typed."""

    kind: str
    hosts: tuple[str, ...]  # ticked hosts (none: all)
    fields: Mapping[str, str]  # text field name -> what was typed
    fail_fast: bool = True
    preflight: bool = True
    stop_on_hang: bool = False
    horovod_elastic: bool = False
    validate: bool = False  # launch --validate: validate --quick in pre-flight


@dataclass(eq=False)
class Services:
    inventory: Inventory
    settings: Settings
    clock: Callable[[], float]  # "now" for relative times (frozen in snapshot tests)
    store: ClusterStore  # the one place screens read cluster state from
    connections: HostStatusSource | None = None
    monitor: ClusterMonitor | None = None
    jobs: JobsService | None = None
    forwards: PortForwards | None = None  # local ports forwarded over the connections
    metrics_listen: tuple[str, int] | None = None  # --metrics-listen: where to serve /metrics
    launch_draft: LaunchDraft | None = None  # written by the launch form as it changes
    # Jobs the caller launched for this console just before it opened (the demo's):
    # followed like any other, never announced as "re-attached".
    started_here: tuple[str, ...] = ()
    # Where the screenshot command writes its SVGs (the directory the console runs in).
    screenshot_dir: Path = field(default_factory=Path.cwd)
