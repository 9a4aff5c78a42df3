"""A TCP proxy that adds latency: every byte reaches the other side DELAY later, in
each direction (so a round trip costs 2 x DELAY). This kernel has no ``tc netem``; a
proxy in front of each host gives the connects of a bench a real network's round trips.

    python bench/delay_proxy.py --delay-ms 25 LISTEN=TARGET [LISTEN=TARGET ...]

LISTEN and TARGET are ``ADDRESS:PORT``. Prints ``ready`` once every listener is up; runs
until SIGINT/SIGTERM. Runs as its own process so its CPU is not the measured client's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import signal
import sys
import time
from collections.abc import Sequence

CHUNK = 65536


def endpoint(text: str) -> tuple[str, int]:
    address, _, port = text.rpartition(":")
    if not address or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected ADDRESS:PORT, got {text!r}")
    return address, int(port)


def mapping(text: str) -> tuple[tuple[str, int], tuple[str, int]]:
    listen, sep, target = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected LISTEN=TARGET, got {text!r}")
    return endpoint(listen), endpoint(target)


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy reader to writer, each chunk held until ``delay`` after it arrived (order kept)."""
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                with contextlib.suppress(OSError):
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(deliver())
    try:
        while True:
            data = await reader.read(CHUNK)
            queue.put_nowait((time.monotonic() + delay, data))
            if not data:
                break
        await sender
    except (OSError, asyncio.IncompleteReadError):
        sender.cancel()
    finally:
        with contextlib.suppress(OSError):
            writer.close()


async def relay(
    target: tuple[str, int],
    delay: float,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    try:
        up_reader, up_writer = await asyncio.open_connection(*target)
    except OSError:
        writer.close()
        return
    await asyncio.gather(pump(reader, up_writer, delay), pump(up_reader, writer, delay))


async def serve(maps: Sequence[tuple[tuple[str, int], tuple[str, int]]], delay: float) -> None:
    servers = [
        await asyncio.start_server(functools.partial(relay, target, delay), *listen)
        for listen, target in maps
    ]
    print("ready", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for server in servers:
        server.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--delay-ms", type=float, required=True, help="one-way delay")
    parser.add_argument("maps", nargs="+", type=mapping, metavar="LISTEN=TARGET")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.maps, args.delay_ms / 1000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
