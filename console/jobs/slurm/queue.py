"""Which Slurm jobs hold which nodes, every user's, read on the inventory's login host.

``squeue --json`` (all users) every few seconds gives each running job's allocation:
slurmctld 22.05 writes ``job_resources.allocated_nodes[i].nodename`` with, at the same
position, ``gres_detail[i]`` (``gpu:1(IDX:0)``, ``gpu:a100:2(IDX:0-1)``): the GPUs the
job holds on that node, by the node's own GPU index (nvidia-smi's). ``sinfo --json``
gives each node's ``address`` (NodeAddr), so a node maps to the inventory host of that
name, else to the host at that address. The parsers are pure (tested on output captured
from the real 22.05 controller); :class:`SlurmQueuePoller` runs them over SSH.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from console.errors import TransportError
from console.inventory import Host, Inventory
from console.jobs.slurm.state import _state_word
from console.transport.base import HostConnection
from console.transport.ship import with_setup

POLL_S = 5.0
COMMAND_TIMEOUT_S = 30.0
# Jobs that hold their nodes: a pending job has none, an ended one has let them go.
HOLDING = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "CONFIGURING"})

_IDX = re.compile(r"IDX:(?P<idx>[0-9,-]+)")
_HOSTLIST = re.compile(r"([^,\[]+)(?:\[([^\]]+)\])?")


@dataclass(frozen=True, slots=True)
class SlurmJobOnNode:
    """One Slurm job's share of one node."""

    slurm_id: str
    user: str
    name: str
    state: str  # squeue's job_state: RUNNING, COMPLETING, ...
    gpus: int = 0  # GPUs it holds on this node
    gpu_indices: tuple[int, ...] = ()  # which ones (the node's indices), when Slurm says
    mine: bool = False  # run by the login host's user
    node: str = ""  # Slurm's name of the node (srun -w), whatever host it maps to
    console_job: str = ""  # the distconsole job id, when the console launched it

    @property
    def label(self) -> str:
        """``slurm 123 alice train``, ``(yours)`` after one of the console user's; a
        job this console launched goes by its distconsole id (its processes' label), so
        the grid and the summary count it once."""
        if self.console_job:
            return self.console_job
        text = f"slurm {self.slurm_id} {self.user} {self.name}"
        return text + " (yours)" if self.mine else text


Occupancy = Mapping[str, tuple[SlurmJobOnNode, ...]]  # node (or host) -> its jobs


def _indices(text: str) -> tuple[int, ...]:
    found: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            found.extend(range(int(low), int(high or low) + 1))
    return tuple(found)


def _outside_parens(text: str) -> list[str]:
    # "gpu:2(IDX:0,2),mps:0": the IDX list has commas of its own.
    parts, depth, start = [], 0, 0
    for at, char in enumerate(text):
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            parts.append(text[start:at])
            start = at + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def gres_gpus(detail: str) -> tuple[int, tuple[int, ...]]:
    """(GPUs, their indices) of one ``gres_detail`` entry (``gpu:1(IDX:0)``,
    ``gpu:a100:2(IDX:0-1)``, ``gpu:2(IDX:0,2)``); (0, ()) for other gres."""
    gpus = 0
    indices: tuple[int, ...] = ()
    for entry in _outside_parens(detail):
        head, _, rest = entry.partition("(")
        words = head.split(":")
        if words[0] != "gpu":
            continue
        idx = _IDX.search(rest)
        these = _indices(idx["idx"]) if idx else ()
        count = words[-1] if len(words) > 1 and words[-1].isdigit() else None
        gpus += int(count) if count else len(these) or 1
        indices += these
    return gpus, indices


def expand_nodes(nodes: str) -> list[str]:
    """Slurm's host list ``n[1-2],gpu[08-09,11]`` -> ``[n1, n2, gpu08, gpu09, gpu11]``."""
    names: list[str] = []
    for found in _HOSTLIST.finditer(nodes):
        stem, ranges = found.group(1).strip(), found.group(2)
        if not ranges:
            if stem:
                names.append(stem)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            width = len(low)
            for n in range(int(low), int(high or low) + 1):
                names.append(f"{stem}{n:0{width}d}")
    return names


def _load(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{what}: not JSON ({e})") from e
    if not isinstance(data, dict):
        raise ValueError(f"{what}: expected an object")
    return data


def occupancy_from_squeue(
    text: str, me: str | None = None
) -> dict[str, tuple[SlurmJobOnNode, ...]]:
    """``{node: (job, ...)}`` of the jobs holding nodes in ``squeue --json`` output,
    jobs in id order; ``me``: the user whose jobs are marked ``mine``."""
    found: dict[str, list[SlurmJobOnNode]] = {}
    for job in _load(text, "squeue --json").get("jobs") or ():
        if not isinstance(job, dict):
            continue
        state = _state_word(job.get("job_state"))
        if state not in HOLDING:
            continue
        resources = job.get("job_resources") or {}
        allocated = [
            str(n.get("nodename"))
            for n in (resources.get("allocated_nodes") or ())
            if isinstance(n, dict) and n.get("nodename")
        ]
        nodes = allocated or expand_nodes(str(job.get("nodes") or ""))
        details = [str(d) for d in job.get("gres_detail") or ()]
        user = str(job.get("user_name") or job.get("user_id") or "?")
        for at, node in enumerate(nodes):
            gpus, indices = gres_gpus(details[at]) if at < len(details) else (0, ())
            found.setdefault(node, []).append(
                SlurmJobOnNode(
                    slurm_id=str(job.get("job_id")),
                    user=user,
                    name=str(job.get("name") or ""),
                    state=state,
                    gpus=gpus,
                    gpu_indices=indices,
                    mine=me is not None and user == me,
                    node=node,
                )
            )
    return {
        node: tuple(sorted(jobs, key=lambda j: (len(j.slurm_id), j.slurm_id)))
        for node, jobs in found.items()
    }


def node_addresses(text: str) -> dict[str, str]:
    """``{node: NodeAddr}`` from ``sinfo --json`` (a node listed once per partition)."""
    addresses: dict[str, str] = {}
    for node in _load(text, "sinfo --json").get("nodes") or ():
        if isinstance(node, dict) and node.get("name"):
            addresses[str(node["name"])] = str(node.get("address") or node["name"])
    return addresses


def node_hosts(hosts: Iterable[Host], addresses: Mapping[str, str]) -> dict[str, str]:
    """``{node: inventory host}``: the host of the node's name, else of its address."""
    every = list(hosts)
    by_name = {h.name for h in every}
    by_address: dict[str, str] = {}
    for host in every:
        by_address.setdefault(host.address, host.name)
    mapped: dict[str, str] = {}
    for node, address in addresses.items():
        name = node if node in by_name else by_address.get(address)
        if name is not None:
            mapped[node] = name
    return mapped


def on_hosts(
    occupancy: Occupancy, mapping: Mapping[str, str]
) -> dict[str, tuple[SlurmJobOnNode, ...]]:
    """The occupancy keyed by inventory host where a node maps to one, else by node."""
    return {mapping.get(node, node): jobs for node, jobs in occupancy.items()}


def with_console_jobs(
    occupancy: Occupancy, launched: Mapping[str, str]
) -> dict[str, tuple[SlurmJobOnNode, ...]]:
    """The occupancy with each job the console launched (``launched``: Slurm id ->
    distconsole job id, from ``slurm_store.SlurmStore.all()``) named by its job id."""
    return {
        where: tuple(
            replace(job, console_job=launched[job.slurm_id])
            if job.mine and job.slurm_id in launched
            else job
            for job in jobs
        )
        for where, jobs in occupancy.items()
    }


class Connections(Protocol):
    def __getitem__(self, name: str) -> HostConnection: ...


class SlurmQueuePoller:
    """``squeue --json`` on the login host every ``poll_s``: yields the occupancy keyed
    by inventory host (a node no host maps to keeps its own name) whenever it changes.

    A failed poll (login host down, squeue failing) is reported through ``problem``
    and retried at the next interval; it never ends the iteration."""

    def __init__(
        self, connections: Connections, inventory: Inventory, *, poll_s: float = POLL_S
    ) -> None:
        if inventory.slurm is None:
            raise ValueError("the inventory has no slurm: section naming the login host")
        self.connections = connections
        self.inventory = inventory
        self.login = inventory.get(inventory.slurm.login)
        self.poll_s = poll_s
        self.me: str | None = None
        self.mapping: dict[str, str] | None = None
        self.problem: str | None = None

    async def _run(self, command: str) -> str:
        conn = self.connections[self.login.name]
        result = await conn.run(with_setup(self.login.setup, command), timeout=COMMAND_TIMEOUT_S)
        if result.exit_status != 0:
            raise RuntimeError(f"{command}: {result.stderr.strip() or result.exit_status}")
        return result.stdout

    async def poll(self) -> dict[str, tuple[SlurmJobOnNode, ...]]:
        """One look: the occupancy keyed by host (the user and node map asked once)."""
        if self.me is None:
            self.me = (await self._run("id -un")).strip()
        if self.mapping is None:
            addresses = node_addresses(await self._run("sinfo --json"))
            self.mapping = node_hosts(self.inventory.hosts, addresses)
        occupancy = occupancy_from_squeue(await self._run("squeue --json"), self.me)
        return on_hosts(occupancy, self.mapping)

    async def updates(self) -> AsyncIterator[dict[str, tuple[SlurmJobOnNode, ...]]]:
        last: dict[str, tuple[SlurmJobOnNode, ...]] | None = None
        while True:
            try:
                now = await self.poll()
                self.problem = None
            except (TransportError, RuntimeError, ValueError) as e:
                self.problem = f"squeue on {self.login.name}: {e}"
                now = None
            if now is not None and now != last:
                last = now
                yield now
            await asyncio.sleep(self.poll_s)
