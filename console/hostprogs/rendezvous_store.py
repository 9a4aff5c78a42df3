"""A job's rendezvous store on its rendezvous host (``--rendezvous-host``, issue 31).

torch's own ``TCPStore`` as the c10d rendezvous backend serves it, started before the
training agents and living until it is stopped (SIGTERM, SIGINT: the job's end), so
that no training host holds the store and any of them may be lost. Every agent connects
with ``is_host=0`` (jobs/plan/ddp.py); ``multi_tenant`` as torch's c10d backend creates
it, ``wait_for_workers=False`` since agents come and go.

While it runs it writes the rendezvous' last complete round (its number and how many
agents it was formed with: torch takes a dead or leaving agent out of a complete round's
participants, so the most seen for that round) to ``rendezvous-round.json``, read from the store as
torch's c10d backend keeps it (``torch.rendezvous.<run id>``: a pickled state, base64):
the leader supervisor on this host has no worker of its own to read a round from
(supervisor/elastic.py), and the round tells it which hosts the survivors went on
without.

A host program: the standard library and torch only (run with the host's Python that
has torch, like the ranks).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import pickle
import signal
import sys
import threading
import time
from datetime import timedelta
from typing import Any

ROUND_FILE = "rendezvous-round.json"  # supervisor/elastic.py SV_STORE_ROUND
STATE_KEY = "torch.rendezvous."  # + run id: torch's c10d_rendezvous_backend key
POLL_S = 0.5
# The store is torch's and takes no credentials: any user who reaches the port can write
# this key. So the state is unpickled with only the classes torch's rendezvous state is
# made of, never arbitrary callables, and a state larger than torch's ever is is ignored.
STATE_CLASSES = {
    ("torch.distributed.elastic.rendezvous.dynamic_rendezvous", "_RendezvousState"),
    ("torch.distributed.elastic.rendezvous.dynamic_rendezvous", "_NodeDesc"),
    ("datetime", "datetime"),
    ("datetime", "timedelta"),
    ("datetime", "timezone"),  # torch stamps heartbeats with datetime.now(timezone.utc)
}
STATE_MAX_BYTES = 4 << 20


class StateUnpickler(pickle.Unpickler):
    """Refuses every global outside :data:`STATE_CLASSES` (``os.system``, ``eval``...)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in STATE_CLASSES:
            raise pickle.UnpicklingError(f"not a rendezvous state: {module}.{name}")
        return super().find_class(module, name)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rendezvous_store")
    parser.add_argument("--address", required=True, help="the address agents connect to")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--run-id", required=True, help="torchrun's --rdzv-id (the job id)")
    parser.add_argument("--round-file", default="", help="where the rounds are written")
    return parser.parse_args(argv)


def read_round(store: Any, key: str) -> dict[str, Any] | None:
    """The rendezvous' state as torch keeps it: its round, whether complete, agents."""
    if not store.check([key]):
        return None
    raw = store.get(key)
    if len(raw) > STATE_MAX_BYTES:
        return {"error": f"a state of {len(raw)} bytes, not torch's: ignored"}
    try:
        state = StateUnpickler(io.BytesIO(base64.b64decode(raw))).load()
    except Exception as exc:  # a torch whose state reads otherwise, or forged: say so
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    participants = getattr(state, "participants", {}) or {}
    return {
        "round": int(getattr(state, "round", 0)),
        "complete": bool(getattr(state, "complete", False)),
        "closed": bool(getattr(state, "closed", False)),
        "agents": len(participants),
        "addresses": sorted(str(getattr(node, "addr", "?")) for node in participants),
    }


def write_json(path: str, data: dict[str, Any]) -> None:
    temp = path + ".tmp"
    with open(temp, "w") as handle:
        json.dump(data, handle)
    os.replace(temp, path)


def main(argv: list[str]) -> int:
    args = parse(argv)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: stop.set())
    try:
        from torch.distributed import TCPStore
    except ImportError as exc:
        print(
            f"rendezvous store: this Python ({sys.executable}) has no torch ({exc}); "
            "the rendezvous host needs Python with torch (the host's python in hosts.yaml)",
            file=sys.stderr,
            flush=True,
        )
        return 2
    try:
        store = TCPStore(
            args.address,
            args.port,
            is_master=True,
            multi_tenant=True,
            wait_for_workers=False,
            timeout=timedelta(seconds=60),
        )
    except (RuntimeError, ValueError, OSError) as exc:
        print(
            f"rendezvous store: cannot listen on port {args.port} ({exc}); another process "
            "holds it: launch with another --master-port",
            file=sys.stderr,
            flush=True,
        )
        return 3
    print(f"rendezvous store listening on {args.address}:{args.port}", flush=True)
    key = STATE_KEY + args.run_id
    last: dict[str, Any] | None = None
    formed: dict[int, int] = {}  # round -> the most agents seen in it while complete
    while not stop.wait(POLL_S):
        if not args.round_file:
            continue
        found = read_round(store, key)
        if found is not None and found.get("complete"):
            number = int(found["round"])
            formed[number] = max(formed.get(number, 0), int(found["agents"]))
            found["agents_now"], found["agents"] = found["agents"], formed[number]
        if found is None or found == last:
            continue
        last = found
        if found.get("complete") or "error" in found:
            print(f"rendezvous round {json.dumps(found)}", flush=True)
        write_json(args.round_file, {**found, "at": time.time()})
    print("rendezvous store stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
