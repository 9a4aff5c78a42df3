"""The demo's reaper: powers the demo's hosts off when the demo process ends by any means.

The demo's jobs run detached (``setsid``), so nothing ends them when the process that
serves the hosts dies: a terminal window closed (SIGHUP), a SIGTERM, a SIGKILL, a crash.
:func:`start_reaper` starts this module as a process of its own session (a closed
terminal's SIGHUP does not reach it) holding the read end of a pipe whose write end only
the demo holds. When the demo ends, however it ends, the kernel closes that end; the
reaper reads EOF and ends every process carrying the cluster's mark, then removes the
cluster's temporary folder if the demo owned one. A demo that stops normally has done
both already; the reaper then finds nothing and exits.

Run as ``python -m console.transport.demo_reaper TOKEN [ROOT]``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from console.transport.demo_processes import end_processes


def start_reaper(token: str, own_root: Path | None) -> subprocess.Popen[bytes]:
    """The reaper for the cluster marked ``token``; close its stdin to let it go."""
    argv = [sys.executable, "-m", "console.transport.demo_reaper", token]
    if own_root is not None:
        argv.append(str(own_root))
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
        # The demo may run from any directory; the package must import from here.
        env={**os.environ, "PYTHONPATH": _package_parent()},
    )


def _package_parent() -> str:
    here = Path(__file__).resolve().parents[2]
    current = os.environ.get("PYTHONPATH")
    return f"{here}{os.pathsep}{current}" if current else str(here)


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    token = argv[0]
    root = Path(argv[1]) if len(argv) > 1 else None
    while sys.stdin.buffer.read(4096):
        pass  # nothing is ever written: only EOF matters
    end_processes(token, None)
    if root is not None and root.exists():
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
