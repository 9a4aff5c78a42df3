"""`distconsole forward HOSTS HOST:PORT [--local-port L]`: 127.0.0.1:L here reaches
PORT on HOST (as HOST sees it: ``localhost``, or ``HOST:DEST:PORT``), over the
console's own SSH connection to HOST (asyncssh local port forwarding; ``ssh -L``
without a second login). Prints the local address once it listens, then forwards
until Ctrl-C. When HOST's connection drops it waits for the connection to come back and
listens again on the same port (``--no-reconnect``: it ends instead); exit status 1
when the forward ends.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from console.commands.parts import options
from console.errors import EXIT_INTERRUPTED
from console.inventory import Inventory, load


def target_arg(text: str) -> tuple[str, str, int]:
    from console.transport.forward import parse_target

    try:
        return parse_target(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "forward",
        help="forward a local port to a port on a host, over the host's SSH connection",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    options.add_inventory(parser)
    parser.add_argument(
        "target",
        type=target_arg,
        metavar="HOST:PORT",
        help="the inventory host and the port there (HOST:DEST:PORT: DEST as HOST resolves it)",
    )
    parser.add_argument(
        "--local-port",
        type=options.whole_number,
        default=0,
        metavar="L",
        help="the port on 127.0.0.1 (default: a free one, printed)",
    )
    parser.add_argument(
        "--no-reconnect",
        action="store_true",
        help="end (exit status 1) when HOST's connection drops, instead of waiting for it",
    )
    parser.set_defaults(func=run)


async def forward(inventory: Inventory, args: argparse.Namespace) -> int:
    from console.transport.forward import PortForwards
    from console.transport.pool import ClusterConnections

    host, dest, port = args.target
    async with ClusterConnections(inventory.select([host])) as pool:
        status = (await pool.wait_settled())[host]
        if not status.is_up:
            print(
                f"distconsole forward: {host} is {status.state.value}: {status.reason}",
                file=sys.stderr,
            )
            return 1
        waiting: dict[int, str | None] = {}

        def tell() -> None:
            # The connection dropping and coming back, once each, on stderr: stdout's
            # one line is the forward's address, for scripts.
            for each in forwards.live():
                before = waiting.get(each.local_port, each.waiting)
                if each.waiting != before:
                    news = "waiting" if each.waiting else "forwarding again"
                    print(f"distconsole forward: {news}: {each.text()}", file=sys.stderr)
                waiting[each.local_port] = each.waiting

        forwards = PortForwards(pool, on_change=tell, reconnect=not args.no_reconnect)
        opened = await forwards.open(host, port, dest_host=dest, local_port=args.local_port)
        print(f"forwarding {opened.text()}  {opened.url}", flush=True)
        try:
            ended = await forwards.wait_ended(opened.local_port)
        finally:
            await forwards.close_all()
        print(f"distconsole forward: {ended.text()}", file=sys.stderr)
        return 1


def run(args: argparse.Namespace) -> int:
    inventory = load(args.inventory)
    try:
        return asyncio.run(forward(inventory, args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
