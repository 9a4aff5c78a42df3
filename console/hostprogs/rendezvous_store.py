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

It also cuts a scale-down short with what the leader supervisor knows (elastic jobs,
``--hosts-file``: the leader writes ``rendezvous-hosts.json``, supervisor/rendezvous.py).
Left to torch, a lost agent stays a participant of the last round until its keep-alive
expires (3 missed beats), and the survivors' round then waits its last call (2 s) for
agents that will never come. Here (:func:`revise`), written back with torch's own
compare-and-set so that an agent's concurrent update is never lost:

- an agent of a host the leader suspects (its supervisor's connection closed, or a
  scale-down took it out) whose heartbeat has not moved for :data:`DROP_STALE_S` by this
  program's clock (so a host whose supervisor alone ended keeps a beating agent) leaves
  the state as torch's ``_sanitize`` takes a dead node out;
- a round still forming whose participants hold every host the leader expects (the
  hosts of the job now, but the suspects) is marked complete as torch's participants
  do once the last call passed: nobody else is coming.

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
POLL_S = 0.2  # also how finely an agent's heartbeats are timed (DROP_STALE_S)
# An agent beats every keep_alive_interval (1 s: jobs/plan/ddp.py ELASTIC_RDZV_CONF); a
# suspect's that has not moved for half an interval more missed one.
DROP_STALE_S = 1.5
NULL_STATE = b"Y2FuaW1hZGFt"  # c10d_rendezvous_backend's _NULL_SENTINEL: no state yet
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
    parser.add_argument("--hosts-file", default="", help="the leader's suspects and expected")
    parser.add_argument("--min-nodes", type=int, default=1, help="torchrun's --nnodes M:N's M")
    parser.add_argument("--max-nodes", type=int, default=0, help="its N (0: no revision)")
    parser.add_argument(
        "--agent", action="append", default=[], help="HOST=ADDRESS: an agent's --local-addr"
    )
    return parser.parse_args(argv)


def load_state(store: Any, key: str) -> tuple[bytes, Any, str]:
    """(the raw value, torch's state or None, why not) of the rendezvous key."""
    if not store.check([key]):
        return b"", None, ""
    raw = bytes(store.get(key))
    if raw == NULL_STATE:
        return raw, None, ""
    if len(raw) > STATE_MAX_BYTES:
        return raw, None, f"a state of {len(raw)} bytes, not torch's: ignored"
    try:
        return raw, StateUnpickler(io.BytesIO(base64.b64decode(raw))).load(), ""
    except Exception as exc:  # a torch whose state reads otherwise, or forged: say so
        return raw, None, f"{type(exc).__name__}: {exc}"[:300]


def read_round(state: Any) -> dict[str, Any]:
    """The rendezvous' state as torch keeps it: its round, whether complete, agents."""
    participants = getattr(state, "participants", {}) or {}
    return {
        "round": int(getattr(state, "round", 0)),
        "complete": bool(getattr(state, "complete", False)),
        "closed": bool(getattr(state, "closed", False)),
        "agents": len(participants),
        "addresses": sorted(str(getattr(node, "addr", "?")) for node in participants),
    }


class Beats:
    """When each agent's heartbeat last moved, by this program's clock (the agents' own
    stamps come from other hosts' clocks)."""

    def __init__(self) -> None:
        self.seen: dict[Any, tuple[Any, float]] = {}

    def update(self, state: Any, now: float) -> None:
        beats = dict(getattr(state, "last_heartbeats", {}) or {})
        for node, stamp in beats.items():
            if self.seen.get(node, (None, 0.0))[0] != stamp:
                self.seen[node] = (stamp, now)
        for node in set(self.seen) - set(beats):
            del self.seen[node]

    def still_for(self, node: Any, now: float) -> float:
        return now - self.seen.get(node, (None, now))[1]


def revise(
    state: Any, drop: set[str], expected: set[str], nodes: tuple[int, int], stale: Any
) -> list[str]:
    """Changes torch's state in place (see the module doc); what it did, in words.
    ``drop``/``expected``: agent addresses; ``nodes``: torchrun's --nnodes M:N;
    ``stale(node)``: whether its beats stopped."""
    min_nodes, max_nodes = nodes
    if state.closed:
        return []
    done = []
    removed = False
    for node in [n for n in state.last_heartbeats if n.addr in drop and stale(n)]:
        # as torch's _sanitize takes a dead node out (every node it holds beats)
        state.last_heartbeats.pop(node, None)
        removed = state.participants.pop(node, None) is not None or removed
        state.wait_list.discard(node)
        state.redundancy_list.discard(node)
        done.append(f"dropped {node.addr} (pid {node.pid}): its host is lost")
    if removed and state.complete and not state.participants:
        state.complete, state.round = False, state.round + 1  # _remove_participant_epilogue
    elif removed and not state.complete and len(state.participants) < min_nodes:
        state.deadline = None
    if not state.complete and expected:
        done += close(state, expected, drop, min_nodes, max_nodes)
    return done


def close(
    state: Any, expected: set[str], drop: set[str], min_nodes: int, max_nodes: int
) -> list[str]:
    """A round still forming: once every expected host's agent is a participant or waits
    for it (torch's wait list: each joins at its next 1 s poll), the waiting ones join
    now and the round is complete, as torch's join and its last call would make it.
    Every waiting agent but a suspect's: a spare's too (never expected before it joined
    a round: left out, it would wait for the next round again, and the next)."""
    waiting = [n for n in state.wait_list if n.addr not in drop]
    members = [*state.participants, *waiting]
    addresses = [n.addr for n in members]
    if (
        not expected <= set(addresses)
        or len(set(addresses)) < len(addresses)  # an agent's old self too: left to torch
        or not min_nodes <= len(members) <= max_nodes
    ):
        return []
    for node in waiting:  # as _add_to_participants, its heartbeat kept
        state.wait_list.discard(node)
        state.participants[node] = 0
    state.complete, state.deadline = True, None  # as _mark_rendezvous_complete
    for rank, node in enumerate(sorted(state.participants)):
        state.participants[node] = rank
    return [f"round {state.round} complete with {len(members)} agents: every host expected"]


def read_hosts(path: str, agents: dict[str, str]) -> tuple[set[str], set[str]]:
    """The leader's word (supervisor/rendezvous.py): addresses of agents to drop once
    their beats stop, and of those expected in a round."""
    try:
        with open(path) as handle:
            found = json.load(handle)
        suspects, expected = list(found["suspects"]), list(found["expected"])
    except (OSError, ValueError, KeyError, TypeError):
        return set(), set()
    return (
        {agents[h] for h in suspects if h in agents},
        {agents[h] for h in expected if h in agents},
    )


def agent_addresses(given: list[str]) -> dict[str, str]:
    """HOST=ADDRESS pairs; none when two hosts share an address (whose agent is whose
    could not be told, so nothing is dropped or closed on the leader's word)."""
    found = dict(pair.partition("=")[::2] for pair in given)
    if len(set(found.values())) < len(found):
        print("rendezvous store: hosts share an address: left to torch", flush=True)
        return {}
    return found


def tend(
    store: Any, key: str, args: argparse.Namespace, agents: dict[str, str], beats: Beats
) -> Any:
    """One look at the rendezvous: the state read (None if none), revised and written
    back with compare_set where the leader's word calls for it."""
    raw, state, error = load_state(store, key)
    if state is None:
        return {"error": error} if error else None
    now = time.monotonic()
    beats.update(state, now)
    drop, expected = read_hosts(args.hosts_file, agents) if args.hosts_file else (set(), set())
    if (not drop and not expected) or not args.max_nodes:
        return state
    nodes = (args.min_nodes, args.max_nodes)
    done = revise(state, drop, expected, nodes, lambda n: beats.still_for(n, now) >= DROP_STALE_S)
    if done:
        new = base64.b64encode(pickle.dumps(state))
        # torch's own dance: written only over the value read, else an agent wrote
        # meanwhile and the next look starts again from its state.
        if bytes(store.compare_set(key, raw, new)) == new:
            print(f"rendezvous revised: {'; '.join(done)}", flush=True)
        else:
            return load_state(store, key)[1]
    return state


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
    agents = agent_addresses(args.agent)
    beats = Beats()
    last: dict[str, Any] | None = None
    formed: dict[int, int] = {}  # round -> the most agents seen in it while complete
    while not stop.wait(POLL_S):
        state = tend(store, key, args, agents, beats)
        if not args.round_file or state is None:
            continue
        found = state if isinstance(state, dict) else read_round(state)
        if found.get("complete"):
            number = int(found["round"])
            formed[number] = max(formed.get(number, 0), int(found["agents"]))
            found["agents_now"], found["agents"] = found["agents"], formed[number]
        if found == last:
            continue
        last = found
        if found.get("complete") or "error" in found:
            print(f"rendezvous round {json.dumps(found)}", flush=True)
        write_json(args.round_file, {**found, "at": time.time()})
    print("rendezvous store stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
