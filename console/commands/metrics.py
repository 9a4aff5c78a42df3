"""`distconsole metrics HOSTS --listen ADDR:PORT`: a Prometheus endpoint for the hosts.

Every GPU under dcgm-exporter's metric names and labels (``DCGM_FI_DEV_GPU_UTIL{gpu,
UUID,device,modelName,Hostname}``), with ``job`` and ``rank`` on the GPUs a distconsole
job holds, plus ``distconsole_*`` metrics: host up, sample age, job state, and each
running job's per-rank step, steps/s, samples/s and loss from its logs. A scrape reads
the latest samples (one streaming sampler per host, as ``gpus --watch``); it never
starts a round of SSH. Listens on 127.0.0.1 unless told otherwise. Runs until Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from console.commands.parts import options
from console.errors import EXIT_INTERRUPTED, EXIT_OK
from console.inventory import Inventory, load
from console.metrics.dcgm import HOSTNAME_LABEL, HOSTNAME_LABELS
from console.metrics.listen import DEFAULT_ADDRESS, parse_listen

DEFAULT_PORT = 9400  # dcgm-exporter's


def listen_arg(text: str) -> tuple[str, int]:
    try:
        return parse_listen(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "metrics",
        help="serve every GPU's and job's figures to Prometheus (dcgm-exporter's names)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    options.add_inventory(parser)
    parser.add_argument(
        "--listen",
        type=listen_arg,
        default=(DEFAULT_ADDRESS, DEFAULT_PORT),
        metavar="ADDR:PORT",
        help=f"where to serve /metrics (default {DEFAULT_ADDRESS}:{DEFAULT_PORT}; "
        "PORT alone: on 127.0.0.1; port 0: any free port, printed)",
    )
    parser.add_argument(
        "--interval",
        type=options.seconds,
        default=1.0,
        metavar="S",
        help="sampling interval in seconds (default 1)",
    )
    parser.add_argument(
        "--jobs-every",
        type=options.seconds,
        default=30.0,
        metavar="S",
        help="read the hosts' job directories every S seconds (default 30)",
    )
    parser.add_argument(
        "--hostname-label",
        choices=HOSTNAME_LABELS,
        default=HOSTNAME_LABEL,
        help="the host label's spelling: Hostname (dcgm-exporter up to 4.4.1-4.6.0, "
        "the default) or hostname (4.4.2-4.7.0 on)",
    )
    parser.set_defaults(func=run)


async def serve(inventory: Inventory, args: argparse.Namespace) -> None:
    from console.jobs.history import JobHistory
    from console.metrics.endpoint import MetricsEndpoint
    from console.metrics.feeds import JobFeed, feed_views
    from console.probe.monitor import ClusterMonitor
    from console.transport.pool import ClusterConnections

    endpoint = MetricsEndpoint(*args.listen, hostname_label=args.hostname_label).start()
    print(f"serving {endpoint.url}", flush=True)
    try:
        async with (
            ClusterConnections(inventory) as pool,
            ClusterMonitor(pool, interval=args.interval) as monitor,
        ):
            source = endpoint.source
            jobs = JobFeed(pool, inventory, JobHistory(), source, every_s=args.jobs_every)
            await asyncio.gather(feed_views(monitor, source), jobs.run())
    finally:
        endpoint.close()


def run(args: argparse.Namespace) -> int:
    inventory = load(args.inventory)
    try:
        asyncio.run(serve(inventory, args))
    except KeyboardInterrupt:
        # Ctrl-C is how it ends, but still 130 like every other command, so a script
        # can tell it from a server that ended on its own.
        print("distconsole metrics: stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK
