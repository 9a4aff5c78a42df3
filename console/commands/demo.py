"""`distconsole demo`: an embedded cluster of SSH servers on loopback, and the console on it.

``--serve`` only runs the cluster (its inventory path is the first stdout line) until
SIGINT/SIGTERM/SIGHUP, for scripts, benchmarks and a second terminal. Without it the cluster
runs in a daemon thread's event loop while the UI (which runs its own loop) opens on it,
on the GPU screen with a small job already training (:mod:`console.commands.parts.demo_job`)
unless ``--idle``; the job is launched like ``launch --detach`` would, so the console
finds it in the history and follows it as it follows any job it did not start.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from console.commands.parts.demo_job import record_power_off, start_training
from console.errors import ConsoleError
from console.transport.demo import MAX_DEMO_HOSTS, DemoCluster, DemoUnavailable

DEFAULT_HOSTS = 4


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "demo",
        help="run an embedded demo cluster (SSH servers on loopback) and open the console on it",
        description="Start N SSH servers in this process, each on its own loopback address "
        "(127.42.0.x; real shells, simulated GPUs; the hosts reach each other by ssh, so "
        "mpirun and horovodrun work), and open the console on them with a small job "
        "training, or only serve them with --serve.",
    )
    parser.add_argument(
        "--hosts",
        type=_host_count,
        default=DEFAULT_HOSTS,
        metavar="N",
        help=f"number of demo hosts, 1..{MAX_DEMO_HOSTS} (default {DEFAULT_HOSTS})",
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="only serve the cluster: print the inventory path as the first line, "
        "stop on SIGINT/SIGTERM/SIGHUP",
    )
    parser.add_argument(
        "--dir",
        type=_directory,
        default=None,
        metavar="DIR",
        help="keep the cluster's files (inventory, keys, homes) in DIR instead of a "
        "temporary folder that is removed on exit",
    )
    parser.add_argument(
        "--idle",
        action="store_true",
        help="open the console with nothing running (default: a small job trains on the "
        "first hosts)",
    )
    parser.add_argument("--theme", default=None, metavar="T", help="console theme")
    parser.set_defaults(func=run)


def _host_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= MAX_DEMO_HOSTS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_DEMO_HOSTS}, got {value}")
    return value


def _directory(text: str) -> Path:
    path = Path(text).expanduser()
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path")
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a directory")
    return path


def run(args: argparse.Namespace) -> int:
    if args.serve:
        return asyncio.run(_serve(args.hosts, args.dir))
    return _open_console(args.hosts, args.dir, args.theme, idle=args.idle)


async def _serve(hosts: int, directory: Path | None) -> int:
    cluster = _make_cluster(hosts, directory)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    # SIGHUP: the terminal that ran it closed. A harder end (SIGKILL) is the reaper's.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    try:
        path = await _start(cluster)
        print(path, flush=True)
        print(
            f"distconsole demo: {hosts} hosts on {cluster.nodes[0].address}.. port "
            f"{cluster.port}; open the console with `distconsole {path}`; "
            "Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )
        await stop.wait()
    finally:
        await cluster.stop()
    return 0


def _open_console(hosts: int, directory: Path | None, theme: str | None, *, idle: bool) -> int:
    try:
        from console.ui.app import run as run_ui
    except ImportError as exc:
        raise ConsoleError(f"the console UI is not available in this build ({exc})") from exc
    cluster = _make_cluster(hosts, directory)
    loop = asyncio.new_event_loop()
    # The servers live in their own loop so the UI's loop (Textual's) never waits on them.
    thread = threading.Thread(target=loop.run_forever, name="demo-cluster", daemon=True)
    thread.start()
    path: Path | None = None
    try:
        started: Future[Path] = asyncio.run_coroutine_threadsafe(_start(cluster), loop)
        path = started.result(timeout=60)
        notice, job_id = None, None
        if not idle:
            training = asyncio.run_coroutine_threadsafe(start_training(path), loop)
            notice, job_id = training.result(timeout=120)
        return run_ui(
            str(path),
            theme=theme,
            first_screen="gpus",
            # The path whole, first: users copy it from the title bar, and at 80 columns
            # "distconsole — demo · PATH · 4 hosts" cut it (the GPU screen counts hosts).
            title="demo",
            sub_title=str(path),
            notice=notice,
            started=(job_id,) if job_id else (),
        )
    finally:
        asyncio.run_coroutine_threadsafe(cluster.stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        if path is not None:
            record_power_off(path)


async def _start(cluster: DemoCluster) -> Path:
    try:
        return await cluster.start()
    except DemoUnavailable as exc:
        raise ConsoleError(f"demo: {exc.strerror}") from exc


def _make_cluster(hosts: int, directory: Path | None) -> DemoCluster:
    try:
        return DemoCluster(hosts, directory=directory)
    except OSError as exc:
        raise ConsoleError(f"--dir: cannot use {directory}: {exc}") from exc
