"""A failed process's last lines, read on the hosts that hold them (issue 10 part 3).

An MPI/Horovod launcher runs on the first host, but each of its ranks writes its
stderr on the host where the rank ran (``LogFile.host``, ``ranks/rank.R/`` in that
host's job directory; ``jobs/plan/mpi_ranks.py``). Read on the launcher's host, those paths
name nothing (per-host homes) or another host's copy. So the files are grouped by host
(``remote_ops.tail_paths_by_host``) and each group is read on its own host, all at once;
the launcher host's lines come first, then each other host's under a ``[host]`` line.
The cause (``failure_lines.first_error``) is searched in the other hosts' lines first:
a rank's error comes before its launcher's report.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from console.errors import TransportError
from console.jobs.ssh import remote_ops
from console.jobs.ssh.failure_lines import LAUNCHER_REPORT, failure_cause, torchrun_failures
from console.transport.base import HostConnection

READ_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class FailureTail:
    tail: tuple[str, ...]  # the last lines, launcher host first
    # The first error before the launcher's report; () when the first host's lines (shown
    # first, without a launcher's report) already hold it. Another host's rank's error is
    # kept: it comes after the launcher's report in ``tail``, but it is the cause.
    cause: tuple[str, ...]


async def read_failure_tail(
    conn_of: Callable[[str], HostConnection],
    by_host: Mapping[str, Sequence[str]],
    first_host: str,
    *,
    lines: int,
    searched: int,
) -> FailureTail:
    """The last ``lines`` of each file on its host (at most ``2 * lines`` from the first
    host, as before), and the cause from the last ``searched`` lines of each."""
    hosts = [first_host, *(h for h in by_host if h != first_host)]
    reads = await asyncio.gather(
        *(_read(conn_of(h), by_host.get(h, ()), lines, searched) for h in hosts)
    )
    (first_last, first_near), *others = reads
    shown_first = first_last[-2 * lines :]
    tail = list(shown_first)
    for host, (last, _near) in zip(hosts[1:], others, strict=True):
        if last:
            tail += [f"  [{host}]", *last]
    # The ranks' lines came before their launcher's report.
    near_by_host = [(h, near) for h, (_last, near) in zip(hosts[1:], others, strict=True)]
    near_by_host.append((first_host, first_near))
    # torchrun's report names the machine ("localhost"): the inventory's name instead, of
    # the host whose output holds the report (the first such, as failure_cause reads).
    told = next((h for h, near in near_by_host if torchrun_failures(near)[0] is not None), None)
    cause = failure_cause([line for _h, near in near_by_host for line in near], host=told)
    reported = any(LAUNCHER_REPORT.search(line) for line in shown_first)
    if set(cause) <= set(shown_first) and not reported:
        # The last lines, shown first, already show it. Below a launcher's report (which
        # names a rank, not the cause) the cause gets its own heading even so.
        cause = ()
    return FailureTail(tuple(tail), cause)


async def _read(
    conn: HostConnection, paths: Sequence[str], lines: int, searched: int
) -> tuple[list[str], list[str]]:
    if not paths:
        return [], []
    try:
        last = await conn.run(remote_ops.tail_command(paths, lines), timeout=READ_TIMEOUT_S)
        near = await conn.run(remote_ops.tail_command(paths, searched), timeout=READ_TIMEOUT_S)
    except TransportError as exc:
        return [f"  (could not read the log on {conn.host.name}: {exc})"], []
    return last.stdout.splitlines(), near.stdout.splitlines()
