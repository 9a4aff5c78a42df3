"""The TCP ports each host of a job listens on, from its placement.

DDP: the master host's torchrun holds the rendezvous store on the master port, or the
rendezvous host's store program (``--rendezvous-host``) does. PS: task
``k`` listens on ``master port + k`` on its own host (console/jobs/plan/ps.py). Ray: the
head holds the GCS, dashboard, client server and its dashboard agent; every other node
its own dashboard agent (console/jobs/plan/ray.py). MPI/Horovod bind no port the plan
chooses. Pre-flight checks each of these free on the host that binds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from console.jobs.models import JobKind
from console.jobs.plan import ps, ray
from console.jobs.plan.placement import Placement

MASTER_PORT_HINT = "choose another with --master-port (or leave it out to get a free one)"
RANGE_HINT = (
    "the job's ports count up from the master port: choose another with --master-port "
    "(or leave it out to get a free one)"
)


@dataclass(frozen=True, slots=True)
class ListenPort:
    """One port a job's process listens on: which, what for, and how to move it."""

    port: int
    what: str  # "master port", "worker 0's port", "Ray GCS port"
    hint: str  # what to do when it is taken


def listen_ports(p: Placement) -> dict[str, tuple[ListenPort, ...]]:
    """host name -> the ports the job's processes on it listen on (hosts with none left out)."""
    base = p.master_port
    found: dict[str, list[ListenPort]] = {}
    if p.spec.kind is JobKind.DDP:
        holder = p.rendezvous or p.first
        found[holder.name] = [ListenPort(base, "master port", MASTER_PORT_HINT)]
    elif p.spec.kind is JobKind.PS:
        for task, index, ph, port in ps.tasks(p):
            found.setdefault(ph.name, []).append(
                ListenPort(port, f"{task} {index}'s port", RANGE_HINT)
            )
    elif p.spec.kind is JobKind.RAY:
        _listen, dashboard_port = ray.dashboard(p)
        dashboard_hint = (
            "choose another with --ray-dashboard-port"
            if p.spec.ray_dashboard_port is not None
            else RANGE_HINT
        )
        found[p.first.name] = [
            ListenPort(base, "Ray GCS port", RANGE_HINT),
            ListenPort(dashboard_port, "Ray dashboard port", dashboard_hint),
            ListenPort(base + 2, "Ray client server port", RANGE_HINT),
        ]
        for k, ph in enumerate(p.hosts):
            agent = ListenPort(base + 3 + k, "Ray dashboard agent port", RANGE_HINT)
            found.setdefault(ph.name, []).append(agent)
    return {name: tuple(ports) for name, ports in found.items()}
