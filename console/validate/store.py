"""The last ``validate`` verdict per host, kept on the console's machine beside the job
history (``data_dir()``: ``DISTCONSOLE_DATA_DIR`` or the user data directory), keyed by
the inventory file and the host name, for ``health``'s "validated 2 h ago: ok".

One JSON file, ``validations.json``: ``{inventory: {host: {"time", "state", "reasons"}}}``;
written whole to a temporary file and renamed, so a reader never sees half.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from console.jobs.history import DATA_DIR_ENV, data_dir, inventory_key
from console.jobs.private import private_dir, write_private
from console.validate.verdicts import RANK, Row, State, worst

FILE_NAME = "validations.json"


@dataclass(frozen=True, slots=True)
class Validated:
    host: str
    time: float
    state: State
    reasons: tuple[str, ...]

    def ago(self, now: float | None = None) -> str:
        """``validated 2 h ago: ok`` (the reasons are the rows' business)."""
        age = max(0.0, (time.time() if now is None else now) - self.time)
        return f"validated {_age(age)} ago: {self.state}"

    def to_json(self, now: float | None = None) -> dict[str, Any]:
        return {
            "time": self.time,
            "state": self.state,
            "reasons": list(self.reasons),
            "text": self.ago(now),
        }


def _age(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


def store_path() -> Path:
    return data_dir() / FILE_NAME


def _read(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: nothing validated is what health then says
    return loaded if isinstance(loaded, dict) else {}


def save(inventory: str, rows: Sequence[Row], *, now: float | None = None) -> Path:
    """Record each host's verdict (its own row and its GPUs' rows, the worst wins)."""
    path = store_path()
    private_dir(path.parent, tighten_existing=not os.environ.get(DATA_DIR_ENV))
    everything = _read(path)
    hosts = everything.setdefault(inventory_key(inventory), {})
    when = time.time() if now is None else now
    for host in dict.fromkeys(r.host for r in rows):
        own = [r for r in rows if r.host == host]
        reasons = [
            (r.reasons if r.gpu is None else tuple(f"GPU {r.gpu}: {x}" for x in r.reasons))
            for r in own
        ]
        hosts[host] = {
            "time": when,
            "state": worst([r.state for r in own]),
            "reasons": [x for group in reasons for x in group],
        }
    temporary = path.with_name(f".{FILE_NAME}.{os.getpid()}")
    write_private(temporary, json.dumps(everything, indent=1))
    os.replace(temporary, path)
    return path


def load_validated(inventory: str) -> dict[str, Validated]:
    """The recorded verdict of each host of ``inventory`` that was ever validated."""
    found = _read(store_path()).get(inventory_key(inventory), {})
    result: dict[str, Validated] = {}
    if not isinstance(found, dict):
        return result
    for host, entry in found.items():
        if not isinstance(entry, dict) or entry.get("state") not in RANK:
            continue
        try:
            when = float(entry.get("time", 0))
        except (TypeError, ValueError):
            continue
        reasons = tuple(str(x) for x in entry.get("reasons", ()) if isinstance(x, str))
        result[str(host)] = Validated(str(host), when, entry["state"], reasons)
    return result


def validated_texts(inventory: str, now: float | None = None) -> dict[str, str]:
    """``{host: "validated 2 h ago: ok"}`` for a job report's summary."""
    return {host: v.ago(now) for host, v in load_validated(inventory).items()}
