"""The supervisor's single source, assembled from its parts (``supervisor.py``'s doc).

jobctl's shared part comes first (the supervisor uses its process-table and job-file
helpers), then the failure-line rule (the console's own, one copy), the wire,
the policy, H2's hang capture when that file is present, and the supervisor's own
parts: its local processes, its peers, its hang watch, and its main loop.
"""

from __future__ import annotations

import functools
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_FUTURE = "from __future__ import annotations"
_MAIN = 'if __name__ == "__main__":'
PARTS = (
    "jobctl_common.py",
    "failure_lines.py",
    "supervisor_wire.py",
    "supervisor_policy.py",
    "hang_inspect.py",  # with hang_capture.py: hang detection is off without them
    "hang_capture.py",
    "supervisor_local.py",
    "supervisor_peers.py",
    "supervisor_hang.py",
    "supervisor.py",
)


def _part(name: str) -> str:
    text = (_HERE / name).read_text()
    if name != "supervisor.py" and _MAIN in text:
        # A part's own entry point would run before the supervisor's.
        text = text[: text.index(_MAIN)]
    return "\n".join(ln for ln in text.splitlines() if ln.strip() != _FUTURE)


@functools.cache
def supervisor_source() -> str:
    """Every part present, in order, as one script for the host's Python."""
    parts = [_part(name) for name in PARTS if (_HERE / name).exists()]
    return f"{_FUTURE}\n# distconsole job supervisor (console/hostprogs/supervisor.py)\n" + (
        "\n".join(parts) + "\n"
    )
