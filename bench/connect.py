"""How long until N hosts are connected: the pool's bounded fan-out vs one after another.

The hosts are an embedded demo cluster served by a separate process
(`distconsole demo --serve`), so the servers' CPU is not charged to the client figures
(on a small machine they still share cores). For each N it prints the median of
``--repeat`` runs of:

- pool: ``ClusterConnections(hosts, max_parallel=M)``, ``start()`` + ``wait_settled()``;
- sequential: a loop of ``asyncssh.connect`` one host at a time, with the options the
  pool uses (port, user, client key, known_hosts: verification on);

and the ratio sequential / pool (how many times faster the pool is).

Loopback has no round trip, so ``--rtt-ms R`` puts a delaying TCP proxy
(``bench/delay_proxy.py``, its own process) in front of every host: each byte takes
R/2 ms each way, as on a network with an R ms round trip (this kernel has no netem).
The host keys stay verified: the known_hosts entries are rewritten for the proxies.

    python bench/connect.py [--hosts 8,32,64] [--repeat 3] [--max-parallel 32] [--rtt-ms 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import asyncssh
from common import demo_cluster, demo_host_counts, positive_int

from console.inventory import Host, load
from console.transport.base import HostState
from console.transport.pool import ClusterConnections


def _connect_options(host: Host) -> dict[str, object]:
    # The options SshConnection passes for an inventory host (see transport/ssh.py).
    return {
        "port": host.port,
        "username": host.user,
        "client_keys": [host.identity_file],
        "known_hosts": host.known_hosts,
        "connect_timeout": host.connect_timeout,
        "keepalive_interval": host.keepalive_interval,
    }


async def time_pool(hosts: Sequence[Host], max_parallel: int) -> tuple[float, int]:
    started = time.perf_counter()
    pool = ClusterConnections(hosts, max_parallel=max_parallel, reconnect=False)
    await pool.start()
    statuses = await pool.wait_settled()
    elapsed = time.perf_counter() - started
    await pool.close()
    return elapsed, sum(s.state is HostState.UP for s in statuses.values())


async def time_sequential(hosts: Sequence[Host]) -> tuple[float, int]:
    connections: list[asyncssh.SSHClientConnection] = []
    started = time.perf_counter()
    for host in hosts:
        connections.append(await asyncssh.connect(host.address, **_connect_options(host)))
    elapsed = time.perf_counter() - started
    for conn in connections:
        conn.close()
    await asyncio.gather(*(c.wait_closed() for c in connections))
    return elapsed, len(connections)


async def measure(
    hosts: Sequence[Host], counts: Sequence[int], repeat: int, max_parallel: int
) -> None:
    await time_sequential(hosts[:1])  # warm-up: imports, key loading, first handshake
    print(f"{'hosts':>5}  {'pool s':>8}  {'sequential s':>12}  {'ratio':>6}  up (pool/seq)")
    for count in counts:
        chosen = hosts[:count]
        pool_runs: list[float] = []
        seq_runs: list[float] = []
        pool_up = seq_up = 0
        for _ in range(repeat):
            elapsed, pool_up = await time_pool(chosen, max_parallel)
            pool_runs.append(elapsed)
            elapsed, seq_up = await time_sequential(chosen)
            seq_runs.append(elapsed)
        pool_s = statistics.median(pool_runs)
        seq_s = statistics.median(seq_runs)
        print(
            f"{count:>5}  {pool_s:>8.3f}  {seq_s:>12.3f}  {seq_s / pool_s:>5.1f}x  "
            f"{pool_up}/{count} {seq_up}/{count}",
            flush=True,
        )


PROXY_NET = "127.43.0."  # the proxies' addresses: one per demo host, same port


@contextmanager
def delayed(hosts: Sequence[Host], rtt_ms: float, folder: Path) -> Iterator[list[Host]]:
    """``hosts`` reached through a delaying proxy each: (the hosts as the client sees them)."""
    maps, seen = [], []
    for i, host in enumerate(hosts):
        proxy = f"{PROXY_NET}{i + 1}"
        maps.append(f"{proxy}:{host.port}={host.address}:{host.port}")
        seen.append((host, proxy))
    known = folder / "known_hosts.proxied"
    lines = []
    for host, proxy in seen:
        assert host.known_hosts is not None
        for line in Path(host.known_hosts).read_text().splitlines():
            if line.startswith(f"[{host.address}]:{host.port} "):
                lines.append(line.replace(f"[{host.address}]", f"[{proxy}]", 1))
    known.write_text("\n".join(dict.fromkeys(lines)) + "\n")
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("delay_proxy.py")),
         "--delay-ms", f"{rtt_ms / 2:g}", *maps],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    if not ready or proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise SystemExit("bench/connect.py: the delaying proxy did not start")
    try:
        yield [
            h.model_copy(update={"address": proxy, "known_hosts": str(known)}) for h, proxy in seen
        ]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--hosts", type=demo_host_counts, default=[8, 32, 64], metavar="N,N,..")
    parser.add_argument("--repeat", type=positive_int, default=3, metavar="R")
    parser.add_argument("--max-parallel", type=positive_int, default=32, metavar="M")
    parser.add_argument(
        "--rtt-ms", type=float, default=0.0, metavar="R", help="round trip added by a proxy"
    )
    args = parser.parse_args(argv)
    if not 0 <= args.rtt_ms <= 2000:
        parser.error(f"--rtt-ms: must be 0..2000, got {args.rtt_ms:g}")
    with demo_cluster(max(args.hosts), "bench/connect.py") as (servers, inventory_path):
        hosts = load(inventory_path).hosts
        print(
            f"connect bench: demo hosts served by {servers.describe()} on 127.42.0.x; "
            f"pool max_parallel={args.max_parallel}; median of {args.repeat}; "
            f"{os.cpu_count()} CPUs; added round trip {args.rtt_ms:g} ms"
        )
        if args.rtt_ms > 0:
            with delayed(hosts, args.rtt_ms, inventory_path.parent) as proxied:
                asyncio.run(measure(proxied, args.hosts, args.repeat, args.max_parallel))
        else:
            asyncio.run(measure(hosts, args.hosts, args.repeat, args.max_parallel))
            print(
                "(loopback has no round trip: each handshake is CPU work on a shared "
                "machine; --rtt-ms R adds a network's round trips)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
