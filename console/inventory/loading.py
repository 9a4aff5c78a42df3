"""Reading an inventory file: detect its format and hand it to that format's reader."""

from __future__ import annotations

from pathlib import Path

from console.errors import InventoryError
from console.inventory.formats import load_yaml
from console.inventory.hostfile import load_hostfile, looks_like_hostfile
from console.inventory.model import Inventory


def load(path: str | Path) -> Inventory:
    """Load and validate an inventory file; raises InventoryError naming file/line/field.

    The format is detected from the content: lines of ``[user@]host[:port]`` are a pssh
    host_file, lines with ``slots=N`` an Open MPI hostfile, anything else hosts.yaml.
    """
    shown = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InventoryError("file not found", path=shown) from None
    except IsADirectoryError:
        raise InventoryError("is a directory, not an inventory file", path=shown) from None
    except UnicodeDecodeError as exc:
        raise InventoryError(f"not UTF-8 text ({exc.reason})", path=shown) from None
    except OSError as exc:
        raise InventoryError(f"cannot read: {exc.strerror}", path=shown) from None
    base = Path(path).resolve().parent
    if looks_like_hostfile(text):
        return load_hostfile(text, shown)
    return load_yaml(text, shown, base)
