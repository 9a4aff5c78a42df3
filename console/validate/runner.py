"""Running ``validate`` on the hosts: the host program over SSH, the compute phase with
bounded concurrency, the all-hosts all-reduce, the pair rounds, progress on stderr, and
the clean-up that kills every process group it started (also on Ctrl-C).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from console.errors import HostProgramError, TransportError
from console.hostprogs import validate_program
from console.hostprogs.validate_program import PROGRAM, VERSION
from console.inventory import Host
from console.transport.base import HostConnection
from console.transport.hello import check_hello
from console.transport.ship import HostProgram, shipment
from console.transport.streams import stderr_summary
from console.validate.link_server import LinkServer
from console.validate.schedule import (
    Pair,
    disjoint_rounds,
    follow_up_pairs,
    read_again,
    ring_pairs,
)
from console.validate.verdicts import HostResult, Thresholds, slow_pairs

# Window length and count: >= 1 s of wall time in windows >= 0.3 s (a cgroup quota's
# 100 ms periods average out only over such windows); --quick shrinks the sizes.
FULL: dict[str, Any] = {
    "window_s": 0.5,
    "windows": 5,
    "copy_mb": 64,
    "gpu_matrix": 8192,
    "gpu_copy_mb": 1024,
    "host_copy_mb": 256,
    "nccl_mb": 256,
    "allreduce_mb": 16,
}
QUICK: dict[str, Any] = {
    "window_s": 0.3,
    "windows": 4,
    "copy_mb": 16,
    "gpu_matrix": 4096,
    "gpu_copy_mb": 256,
    "host_copy_mb": 64,
    "nccl_mb": 64,
    "allreduce_mb": 4,
}
STORE_TIMEOUT_S = 120.0
KILL_TIMEOUT_S = 15.0

Progress = Callable[[str], None]


class Connections(Protocol):
    """What the runner needs of a pool: a host's connection by name."""

    def __getitem__(self, name: str) -> HostConnection: ...


@cache
def program_source() -> str:
    return Path(validate_program.__file__).read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class Plan:
    quick: bool = False
    parallel: int = 4  # hosts measured at once in the compute phase
    threads: int = 1  # torch.set_num_threads for the CPU test
    links: bool = True
    thresholds: Thresholds = field(default_factory=Thresholds)
    timeout_s: float = 600.0  # one program's run on one host
    window_s: float | None = None  # None: the sizes' own (FULL / QUICK)
    allreduce_mb: int | None = None  # None: the sizes' own

    def config(self, **extra: Any) -> dict[str, Any]:
        sizes = dict(QUICK if self.quick else FULL)
        if self.window_s is not None:
            sizes["window_s"] = self.window_s
        if self.allreduce_mb is not None:
            sizes["allreduce_mb"] = self.allreduce_mb
        return {**sizes, "threads": self.threads, **extra}


@dataclass
class Outcome:
    hosts: list[HostResult] = field(default_factory=list)
    ring: dict[str, Any] | None = None
    pairs: dict[Pair, float] = field(default_factory=dict)
    link_errors: list[str] = field(default_factory=list)


class Session:
    """One validate run's processes: started, read, and killed by process group."""

    def __init__(self, connections: Connections, plan: Plan, progress: Progress) -> None:
        self.connections = connections
        self.plan = plan
        self.progress = progress
        self.groups: dict[str, set[int]] = {}
        self.servers: dict[str, LinkServer] = {}  # hosts' programs for the link tests

    async def run_program(
        self, host: Host, cfg: dict[str, Any], on_port: Callable[[int], None] | None = None
    ) -> dict[str, Any]:
        """Run the program on ``host`` with ``cfg``; its result, or HostProgramError."""
        program = HostProgram(PROGRAM, program_source(), (json.dumps(cfg),))
        sent = shipment(host, program, bash=True)  # setup lines may `source`
        process = await self.connections[host.name].start(sent.command)
        group: int | None = None
        result: dict[str, Any] | None = None
        failure: str | None = None
        try:
            await process.write(sent.stdin)
            process.write_eof()
            async with asyncio.timeout(self.plan.timeout_s):
                first = True
                async for line in process.lines():
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue  # a setup line's chatter
                    if first:
                        check_hello(host.name, PROGRAM, VERSION, record)
                        first = False
                    elif "pgid" in record:
                        group = int(record["pgid"])
                        self.groups.setdefault(host.name, set()).add(group)
                    elif "port" in record and on_port is not None:
                        on_port(int(record["port"]))
                    elif "phase" in record:
                        self.progress(f"{host.name}: {record['phase']}")
                    elif "result" in record:
                        result = dict(record["result"])
                        break
                    elif "error" in record:
                        failure = str(record["error"])
                        break
                status = await process.wait()
        except TimeoutError:
            raise HostProgramError(
                host.name, PROGRAM, f"no result within {self.plan.timeout_s:g} s"
            ) from None
        finally:
            process.close()
        if group is not None and status is not None:
            self.groups[host.name].discard(group)  # it exited: nothing left to kill
        if failure is not None:
            raise HostProgramError(host.name, PROGRAM, failure)
        if result is None:
            raise HostProgramError(
                host.name,
                PROGRAM,
                f"ended with status {status} before its result: "
                + (stderr_summary(process) or "no output"),
            )
        return result

    async def kill_all(self) -> None:
        """SIGKILL every process group this run started that may still be alive."""
        jobs = []
        for name, groups in self.groups.items():
            if not groups:
                continue
            words = " ".join(f"-{g}" for g in sorted(groups))
            command = f"kill -KILL -- {words} 2>/dev/null; true"
            jobs.append(self.connections[name].run(command, timeout=KILL_TIMEOUT_S))
        self.groups = {}
        await asyncio.gather(*jobs, return_exceptions=True)

    # -- phases ------------------------------------------------------------------------

    async def compute(self, hosts: Sequence[Host]) -> list[HostResult]:
        limit = asyncio.Semaphore(max(1, self.plan.parallel))

        async def one(host: Host) -> HostResult:
            async with limit:
                self.progress(f"{host.name}: compute")
                try:
                    answer = await self.run_program(host, self.plan.config(mode="compute"))
                except TransportError as exc:
                    self.progress(f"{host.name}: failed: {exc}")
                    return HostResult(host.name, error=str(exc))
                result = HostResult(host.name, answer.get("host", {}), answer.get("gpus", []))
                self.progress(f"{host.name}: compute done")
                return result

        return list(await asyncio.gather(*(one(h) for h in hosts)))

    async def rank(
        self, host: Host, cfg: dict[str, Any], on_port: Callable[[int], None] | None = None
    ) -> dict[str, Any]:
        """One rank of an all-reduce test: on the host's link server when it has one."""
        server = self.servers.get(host.name)
        if server is None:
            return await self.run_program(host, cfg, on_port)
        try:
            async with asyncio.timeout(self.plan.timeout_s):
                return dict(await server.run(cfg, on_port))
        except TimeoutError:
            raise HostProgramError(
                host.name, PROGRAM, f"no result within {self.plan.timeout_s:g} s"
            ) from None

    async def allreduce(self, hosts: Sequence[Host]) -> dict[str, Any]:
        """One gloo all-reduce over ``hosts``: rank 0 first (it serves the TCPStore on a
        free port and says which), then the others pointed at it."""
        port: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def got_port(value: int) -> None:
            if not port.done():
                port.set_result(value)

        base = self.plan.config(mode="allreduce", world=len(hosts), timeout_s=STORE_TIMEOUT_S)
        leader = asyncio.create_task(
            self.rank(hosts[0], {**base, "rank": 0, "address": hosts[0].address}, got_port)
        )
        either: list[asyncio.Future[Any]] = [leader, port]
        done, _ = await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if port not in done:
            port.cancel()
            return await leader  # it failed before serving: its error is the answer
        ranks = [leader] + [
            asyncio.create_task(
                self.rank(
                    h,
                    {
                        **base,
                        "rank": i,
                        "address": h.address,
                        "master": hosts[0].address,
                        "port": port.result(),
                    },
                )
            )
            for i, h in enumerate(hosts[1:], start=1)
        ]
        try:
            answers = await asyncio.gather(*ranks)
        except BaseException:
            # One rank failed: the others would wait for it until the store's timeout.
            for rank in ranks:
                rank.cancel()
            raise
        return {
            "busbw_gbps": min(float(a["busbw_gbps"]) for a in answers),
            "hosts": [h.name for h in hosts],
            "size_mb": answers[0].get("size_mb"),
        }

    async def pair_round(
        self, pairs: Sequence[Pair], by_name: Mapping[str, Host], out: Outcome
    ) -> None:
        async def one(pair: Pair) -> None:
            try:
                answer = await self.allreduce([by_name[pair[0]], by_name[pair[1]]])
            except TransportError as exc:
                out.link_errors.append(f"{pair[0]}<->{pair[1]}: {exc}")
                return
            out.pairs[pair] = float(answer["busbw_gbps"])
            self.progress(f"pair {pair[0]}<->{pair[1]}: {answer['busbw_gbps']:.3g} GB/s")

        await asyncio.gather(*(one(p) for p in pairs))

    async def links(self, hosts: Sequence[Host], out: Outcome) -> None:
        if len(hosts) < 2:
            return
        self.progress(f"starting the link tests' programs on {len(hosts)} hosts")
        cfg = self.plan.config(mode="links", timeout_s=STORE_TIMEOUT_S)
        started = await asyncio.gather(
            *(
                LinkServer.start(
                    self.connections[h.name],
                    program_source(),
                    cfg,
                    self.groups.setdefault(h.name, set()),
                    self.plan.timeout_s,
                )
                for h in hosts
            ),
            return_exceptions=True,
        )
        for host, server in zip(hosts, started, strict=True):
            if isinstance(server, LinkServer):
                self.servers[host.name] = server
            elif isinstance(server, Exception):
                out.link_errors.append(f"{host.name}: {server}")
            else:
                raise server
        try:
            await self._links([h for h in hosts if h.name in self.servers], out)
        finally:
            await asyncio.gather(*(s.close() for s in self.servers.values()))
            self.servers = {}

    async def _links(self, hosts: Sequence[Host], out: Outcome) -> None:
        if len(hosts) < 2:
            return
        self.progress(f"all-reduce over {len(hosts)} hosts")
        try:
            out.ring = await self.allreduce(hosts)
            self.progress(f"all-reduce over {len(hosts)} hosts: {out.ring['busbw_gbps']:.3g} GB/s")
        except TransportError as exc:
            out.link_errors.append(f"all-reduce over {len(hosts)} hosts: {exc}")
        by_name = {h.name: h for h in hosts}
        names = [h.name for h in hosts]
        reads: Counter[frozenset[str]] = Counter()

        async def read(todo: list[Pair]) -> None:
            for pairs in disjoint_rounds(todo):
                await self.pair_round(pairs, by_name, out)
            reads.update(frozenset(p) for p in todo)

        await read(ring_pairs(names))
        slow = slow_pairs(out.pairs, self.plan.thresholds)
        if not slow:
            return
        extra = [p for p in follow_up_pairs(slow, names) if frozenset(p) not in reads]
        # The slow pairs again, beside their follow-ups: a pair that was slow only while
        # something else loaded its hosts reads fine the second time (its last figure
        # is the one judged).
        await read([*slow, *extra])
        # A follow-up read slow once gets its second figure too (schedule.read_again).
        again = read_again(slow_pairs(out.pairs, self.plan.thresholds), reads)
        if again:
            await read(again)


async def validate_hosts(
    connections: Connections,
    hosts: Sequence[Host],
    plan: Plan,
    progress: Progress,
) -> Outcome:
    """Measure ``hosts`` (those up); every process started is killed before returning,
    also when cancelled (Ctrl-C)."""
    session = Session(connections, plan, progress)
    out = Outcome()
    try:
        out.hosts = await session.compute(hosts)
        ran = [h for h, r in zip(hosts, out.hosts, strict=True) if r.error is None]
        if plan.links:
            await session.links(ran, out)
    finally:
        await asyncio.shield(session.kill_all())
    return out
