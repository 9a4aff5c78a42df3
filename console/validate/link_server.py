"""One host's validate program in ``links`` mode for every link test of a run: torch is
imported once per host (not once per pair round), tests go to it on stdin one JSON line
each, and stdin's EOF (the console closing it, or going away) ends it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from console.errors import HostProgramError, TransportError
from console.hostprogs.validate_program import PROGRAM, VERSION
from console.inventory import Host
from console.transport.base import HostConnection, RemoteProcess
from console.transport.hello import check_hello
from console.transport.ship import HostProgram, shipment
from console.transport.streams import stderr_summary

Record = dict[str, Any] | BaseException | None
CLOSE_WAIT_S = 10.0


class LinkServer:
    def __init__(self, host: Host, process: RemoteProcess, groups: set[int]) -> None:
        self.host = host
        self.process = process
        self.groups = groups  # the session's kill list for this host
        self.group: int | None = None
        self.records: asyncio.Queue[Record] = asyncio.Queue()
        self.lock = asyncio.Lock()
        self.count = 0
        self.broken = ""  # why no further test can run here
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def start(
        cls,
        connection: HostConnection,
        source: str,
        cfg: dict[str, Any],
        groups: set[int],
        timeout: float,
    ) -> LinkServer:
        host = connection.host
        # stdin="": the program keeps stdin for its tests; its source goes as -c SOURCE.
        program = HostProgram(PROGRAM, source, (json.dumps(cfg),), stdin="")
        process = await connection.start(shipment(host, program, bash=True).command)
        server = cls(host, process, groups)
        try:
            async with asyncio.timeout(timeout):
                while True:
                    record = await server._next()
                    if record.get("ready"):
                        return server
                    if "error" in record:
                        raise HostProgramError(host.name, PROGRAM, str(record["error"]))
        except BaseException:
            await server.close()
            raise

    async def _read(self) -> None:
        first = True
        try:
            async for line in self.process.lines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a setup line's chatter
                if first:
                    first = False
                    check_hello(self.host.name, PROGRAM, VERSION, record)
                elif "pgid" in record:
                    self.group = int(record["pgid"])
                    self.groups.add(self.group)
                elif isinstance(record, dict):
                    self.records.put_nowait(record)
        except HostProgramError as exc:
            self.records.put_nowait(exc)
        self.records.put_nowait(None)

    async def _next(self) -> dict[str, Any]:
        record = await self.records.get()
        if isinstance(record, BaseException):
            raise record
        if record is None:
            self.records.put_nowait(None)  # every later reader learns it ended too
            detail = stderr_summary(self.process) or "no output"
            raise HostProgramError(self.host.name, PROGRAM, f"ended before its answer: {detail}")
        return record

    async def run(self, test: dict[str, Any], on_port: Callable[[int], None] | None) -> Any:
        """One all-reduce test's result on this host (its rank's figures)."""
        async with self.lock:
            if self.broken:
                raise HostProgramError(self.host.name, PROGRAM, self.broken)
            self.count += 1
            ident = self.count
            try:
                await self.process.write(json.dumps({**test, "id": ident}) + "\n")
                while True:
                    record = await self._next()
                    if record.get("id") != ident:
                        continue
                    if "port" in record and on_port is not None:
                        on_port(int(record["port"]))
                    elif "result" in record:
                        return record["result"]
                    elif "error" in record:
                        raise HostProgramError(self.host.name, PROGRAM, str(record["error"]))
            except (asyncio.CancelledError, TimeoutError):
                # Its rank may still wait in the collective: no later test runs here.
                self.broken = f"an earlier link test (#{ident}) did not finish"
                raise

    async def close(self) -> None:
        """End the program (stdin's EOF) and wait a little for it to leave."""
        try:
            self.process.write_eof()
            async with asyncio.timeout(CLOSE_WAIT_S):
                status = await self.process.wait()
            if status is not None and self.group is not None:
                self.groups.discard(self.group)
        except (TimeoutError, OSError, TransportError):
            pass  # the session's kill list still holds its group
        finally:
            self.process.close()
            self.reader.cancel()
