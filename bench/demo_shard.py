"""One shard of a demo cluster served by several processes (bench/common.serve).

``python bench/demo_shard.py --hosts N --first F`` serves the demo hosts node<F> ..
node<F+N-1> (their own loopback addresses, one port) until SIGINT or SIGTERM; its first
stdout line is its inventory path. One process serving 256 SSH servers was the
bottleneck of the 256-host figures: every host's key exchange, channel and sampler
pipe ran on one event loop on one core, so those figures measured the demo, not the
console. Serving 32 hosts a process spreads that work over the machine's cores, as
separate machines would.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

import common  # noqa: F401  (puts this checkout's package first on sys.path)

from console.transport.demo import DemoCluster


async def serve(hosts: int, first: int) -> None:
    cluster = DemoCluster(hosts, first=first)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        print(await cluster.start(), flush=True)
        await stop.wait()
    finally:
        await cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, required=True, help="hosts in this shard")
    parser.add_argument("--first", type=int, default=0, help="index of the shard's first host")
    args = parser.parse_args()
    asyncio.run(serve(args.hosts, args.first))


if __name__ == "__main__":
    main()
