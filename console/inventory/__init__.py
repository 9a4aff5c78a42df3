"""The inventory: hosts.yaml (or a pssh host_file, or an Open MPI hostfile) -> a validated,
immutable :class:`Inventory`.

``model`` holds the models the rest of the core codes against; ``formats`` (hosts.yaml)
and ``hostfile`` (host_file / hostfile) read text into them; ``loading`` picks the reader.
The sub-modules import ``model``, never this package, so the package is a façade with no
cycle behind it. This package imports only the bottom layer (errors, names, validation).
"""

from __future__ import annotations

from pathlib import Path

from console.inventory.model import (
    LOCAL_ADDRESS,
    Host,
    Inventory,
    SlurmSettings,
    Tag,
    build_host,
    host_problems,
    slurm_problems,
)

__all__ = [
    "LOCAL_ADDRESS",
    "Host",
    "Inventory",
    "SlurmSettings",
    "Tag",
    "build_host",
    "host_problems",
    "load",
    "slurm_problems",
]


def load(path: str | Path) -> Inventory:
    """Load and validate an inventory file; raises InventoryError naming file/line/field.

    The format is detected from the content (:func:`console.inventory.loading.load`).
    """
    # Imported here so that `import console.inventory` stays cheap (no YAML parser) for
    # code that only needs the models.
    from console.inventory import loading

    return loading.load(path)
