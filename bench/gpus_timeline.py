"""Worker of ``bench/gpus_cli.py --timeline``: one ``distconsole gpus --json`` run with
the time (and this process's CPU) at each step, from the process's start to its exit.

    python bench/gpus_timeline.py SPAWNED_AT INVENTORY [gpus options...]

SPAWNED_AT is the parent's ``time.time()`` just before it started this process. The
command runs through ``console.cli.main`` as ``python -m console gpus`` would; the
steps are read by wrapping the console's own methods (connect, session start, sampler
line reader), which then call the originals unchanged. The last stdout line is the
timeline as JSON (the parent adds the process's exit); the command's own output goes to
/dev/null.
"""

from __future__ import annotations

import time

_UP = time.time()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

Events = dict[str, list[tuple[float, float]]]


def _instrument(events: Events) -> None:
    from console.commands import gpus
    from console.probe import sampler
    from console.transport import ssh

    def mark(step: str) -> None:
        events.setdefault(step, []).append((time.time(), time.process_time()))

    load = gpus.load
    connect_once = ssh.SshConnection.connect_once
    start = ssh.SshConnection.start
    read = sampler.SampleReader.read

    def timed_load(path: Any) -> Any:
        inventory = load(path)
        mark("inventory loaded")
        return inventory

    async def timed_connect(self: ssh.SshConnection) -> Any:
        status = await connect_once(self)
        mark("connected (key exchange, auth)")
        return status

    async def timed_start(self: ssh.SshConnection, command: str, **kw: Any) -> Any:
        process = await start(self, command, **kw)
        mark("session opened (exec accepted)")
        return process

    def timed_read(self: sampler.SampleReader, line: str, now: float | None = None) -> Any:
        out = read(self, line, now)
        mark("hello read (shell, python3, source)" if out is None else "sample read")
        return out

    patches: list[tuple[Any, str, Callable[..., Any]]] = [
        (gpus, "load", timed_load),
        (ssh.SshConnection, "connect_once", timed_connect),
        (ssh.SshConnection, "start", timed_start),
        (sampler.SampleReader, "read", timed_read),
    ]
    for owner, name, wrapper in patches:
        setattr(owner, name, wrapper)


def main() -> int:
    spawned = float(sys.argv[1])
    gpus_args = sys.argv[2:]
    events: Events = {"python up": [(_UP, time.process_time())]}
    # What `distconsole gpus` imports on its way to the first connection.
    import console.cli
    import console.commands.gpus
    import console.probe.monitor
    import console.transport.pool

    events["imports"] = [(time.time(), time.process_time())]
    _instrument(events)
    out = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(1)
    os.dup2(out, 1)
    try:
        status = console.cli.main(["gpus", "--json", *gpus_args])
        sys.stdout.flush()
    finally:
        os.dup2(saved, 1)
    events["JSON written (connections closed)"] = [(time.time(), time.process_time())]
    steps = {step: sorted((t - spawned, cpu) for t, cpu in marks) for step, marks in events.items()}
    print(json.dumps({"status": status, "steps": steps}))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
