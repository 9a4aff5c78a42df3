"""hosts.yaml -> a validated, immutable :class:`Inventory`.

The models below are the contract the rest of the core codes against. ``load()``
accepts hosts.yaml, a pssh host_file (``user@host[:port]`` per line) and an Open MPI
hostfile (``host slots=N``); every error is an :class:`InventoryError` naming file,
line and field.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from console.errors import InventoryError

LOCAL_ADDRESS = "local"


class Host(BaseModel):
    """One machine of the cluster, with every default already applied."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    address: str
    port: int | None = None  # None: ~/.ssh/config or 22
    user: str | None = None  # None: ~/.ssh/config or the local user
    identity_file: str | None = None
    known_hosts: str | None = None  # None: OpenSSH's usual files
    insecure_host_keys: bool = False
    connect_timeout: float = 10.0
    keepalive_interval: float = 15.0
    work_dir: str = "~/distconsole"
    setup: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    interface: str | None = None
    gpus: int | Literal["auto"] = "auto"
    tags: tuple[str, ...] = ()
    proxy_jump: str | None = None
    python: str = "python3"
    # "simulated" is only ever set by the demo's own inventory; real hosts read NVML/nvidia-smi.
    gpu_source: Literal["auto", "simulated"] = "auto"

    @property
    def is_local(self) -> bool:
        return self.address == LOCAL_ADDRESS


class Inventory(BaseModel):
    """All hosts of one inventory file, in file order (the first host is the master)."""

    model_config = ConfigDict(frozen=True)

    path: str
    hosts: tuple[Host, ...]

    def get(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        known = ", ".join(h.name for h in self.hosts)
        raise InventoryError(f"no host named {name!r} (hosts: {known})", path=self.path)

    def select(
        self, names: Sequence[str] | None = None, tags: Iterable[str] | None = None
    ) -> tuple[Host, ...]:
        """Hosts by name (in the order given) and/or by tag; all hosts when neither is given."""
        chosen: list[Host] = [self.get(n) for n in names] if names else list(self.hosts)
        wanted = set(tags or ())
        if wanted:
            chosen = [h for h in chosen if wanted.intersection(h.tags)]
        return tuple(chosen)

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(sorted({t for h in self.hosts for t in h.tags}))


def load(path: str | Path) -> Inventory:
    """Load and validate an inventory file; raises InventoryError naming file/line/field."""
    raise NotImplementedError  # filled in by the inventory work
