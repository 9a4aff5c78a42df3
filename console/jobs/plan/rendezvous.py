"""Which host of the inventory is a job's rendezvous host (``--rendezvous-host``, else
the leader host's ``rendezvous_host`` in hosts.yaml): a host that trains nothing and
holds the job's rendezvous (ddp: torch's c10d store in our store program,
hostprogs/rendezvous_store.py; Horovod elastic: the driver) and its leader supervisor,
so that any training host may be lost (issue 31).
"""

from __future__ import annotations

from collections.abc import Iterable

from console.errors import JobSpecError
from console.inventory import Host, Inventory
from console.jobs.models import JobKind
from console.jobs.spec import JobSpec

ROLE = "rendezvous"  # the RankLaunch role of the process on the rendezvous host


def rendezvous_name(spec: JobSpec, chosen: tuple[Host, ...]) -> str | None:
    """--rendezvous-host, else the leader host's ``rendezvous_host``. The inventory's
    is a default: only for the kinds with a rendezvous to move (ddp, Horovod elastic),
    and never one of the hosts or spares the job names."""
    if spec.rendezvous_host is not None:
        return spec.rendezvous_host
    elastic_horovod = spec.kind is JobKind.HOROVOD and spec.horovod_elastic
    if spec.kind is not JobKind.DDP and not elastic_horovod:
        return None
    leader = next((h for h in chosen if h.name != h.rendezvous_host), None)
    name = leader.rendezvous_host if leader is not None else None
    if name is None or name in spec.hosts or name in spec.spare_hosts:
        return None
    return name


def rendezvous_host(
    inventory: Inventory, name: str, chosen: tuple[Host, ...], spares: Iterable[str]
) -> Host:
    """The rendezvous host: a host of the inventory, neither a training host nor a spare."""
    by_name = {h.name: h for h in inventory.hosts}
    if name not in by_name:
        raise JobSpecError(
            "rendezvous_host",
            f"no host named {name} in {inventory.path} "
            f"(hosts: {', '.join(h.name for h in inventory.hosts)})",
        )
    if name in {h.name for h in chosen}:
        raise JobSpecError(
            "rendezvous_host",
            f"{name} is one of the job's hosts: the rendezvous host trains nothing "
            "(leave it out of --hosts and --tag)",
        )
    if name in set(spares):
        raise JobSpecError("rendezvous_host", f"{name} is one of the job's --spare-hosts")
    return by_name[name]
