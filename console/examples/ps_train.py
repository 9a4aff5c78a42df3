"""Parameter-server / worker trainer driven by TF_CONFIG (standard library only).

TF_CONFIG: ``{"cluster": {"ps": ["host:port", ...], "worker": [...], "chief": [...]},
"task": {"type": "ps" | "worker" | "chief", "index": i}}``.

- A ``ps`` task holds one shard of a linear model's weights and serves it on its port
  until it is stopped (SIGTERM/SIGINT: exit 0). Protocol, one line each way:
  ``PULL`` -> weights; ``PUSH lr g1 g2 ...`` -> applies the gradient, returns weights.
- A ``worker`` (or the ``chief``) pulls every shard, computes a least-squares gradient
  on its own random batch, pushes it back, and prints ``worker I step N/S loss L
  samples/s X steps/s Y``; after its steps it exits 0.

Checkpoints (distconsole's contract): a worker writes its step to
``$DISTCONSOLE_CHECKPOINT_DIR/worker-I.json`` after every step; restarted (``--max-restarts``:
its host's supervisor runs it again, ``DISTCONSOLE_RESTART_COUNT`` set) it goes on from
there and prints ``worker I resumed from step K``. The weights live in the ps tasks.

Test knobs: ``--crash-rank I --crash-at-step S`` (worker index I exits 3 at step S; with
``--crash-once`` only in a run that did not resume), ``--sleep SECONDS`` per step.
Unknown arguments are printed as ``extra_args=[...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import socketserver
import sys
import threading
import time
from types import FrameType
from typing import IO

FEATURES_PER_SHARD = 4
CONNECT_TIMEOUT_S = 60.0


def parse() -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__)
    default_steps = int(os.environ.get("DISTCONSOLE_STEPS_PER_RANK", "20"))
    parser.add_argument("--steps", type=int, default=default_steps)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep per step")
    parser.add_argument("--crash-rank", type=int, default=-1)
    parser.add_argument("--crash-at-step", type=int, default=-1)
    parser.add_argument("--crash-once", action="store_true", help="not after a restart")
    return parser.parse_known_args()


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class Shard:
    def __init__(self) -> None:
        self.weights = [0.0] * FEATURES_PER_SHARD
        self.updates = 0
        self.lock = threading.Lock()

    def push(self, lr: float, grad: list[float]) -> list[float]:
        with self.lock:
            self.weights = [w - lr * g for w, g in zip(self.weights, grad, strict=True)]
            self.updates += 1
            return list(self.weights)

    def pull(self) -> list[float]:
        with self.lock:
            return list(self.weights)


def serve_ps(index: int, address: str) -> int:
    shard = Shard()

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            for raw in self.rfile:
                words = raw.decode().split()
                if not words:
                    continue
                if words[0] == "PUSH":
                    weights = shard.push(float(words[1]), [float(w) for w in words[2:]])
                    if shard.updates % 10 == 0:
                        print(f"ps {index} updates {shard.updates}", flush=True)
                else:
                    weights = shard.pull()
                self.wfile.write((" ".join(repr(w) for w in weights) + "\n").encode())

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    socketserver.ThreadingTCPServer.daemon_threads = True
    _, port = split_address(address)
    server = socketserver.ThreadingTCPServer(("", port), Handler)

    def stop(signum: int, _frame: FrameType | None) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"ps {index} serving on port {port}", flush=True)
    server.serve_forever()
    print(f"ps {index} stopped after {shard.updates} updates", flush=True)
    return 0


def connect(address: str) -> socket.socket:
    host, port = split_address(address)
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        try:
            return socket.create_connection((host, port), timeout=30)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def checkpoint_path(kind: str, index: int) -> str | None:
    directory = os.environ.get("DISTCONSOLE_CHECKPOINT_DIR")
    if not directory:
        return None
    os.makedirs(directory, exist_ok=True)
    return os.path.join(directory, f"{kind}-{index}.json")


def resumed_step(path: str | None) -> int:
    try:
        with open(path or "") as handle:
            return int(json.load(handle)["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def save_step(path: str | None, step: int) -> None:
    if path is not None:
        with open(path + ".tmp", "w") as handle:
            json.dump({"step": step}, handle)
        os.replace(path + ".tmp", path)


def train(kind: str, index: int, ps: list[str], args: argparse.Namespace) -> int:
    conns = [connect(a) for a in ps]
    files = [c.makefile("rw") for c in conns]
    checkpoint = checkpoint_path(kind, index)
    first = resumed_step(checkpoint)
    restarts = int(os.environ.get("DISTCONSOLE_RESTART_COUNT") or 0)
    if first:
        print(f"{kind} {index} resumed from step {first} (restart {restarts})", flush=True)
    crash = index == args.crash_rank and not (args.crash_once and (restarts or first))
    rng = random.Random(1000 + index + 1_000_003 * first)
    n = FEATURES_PER_SHARD * len(ps)
    true_w = [(i % 5) - 2.0 for i in range(n)]

    def ask(f: IO[str], line: str) -> list[float]:
        f.write(line + "\n")
        f.flush()
        return [float(w) for w in f.readline().split()]

    for step in range(first + 1, args.steps + 1):
        started = time.perf_counter()
        if crash and step == args.crash_at_step and kind == "worker":
            print(f"worker {index} crashing at step {step} as asked", file=sys.stderr, flush=True)
            return 3
        weights = [w for f in files for w in ask(f, "PULL")]
        grad = [0.0] * n
        loss = 0.0
        for _ in range(args.batch_size):
            x = [rng.uniform(-1, 1) for _ in range(n)]
            err = sum(a * b for a, b in zip(weights, x, strict=True)) - sum(
                a * b for a, b in zip(true_w, x, strict=True)
            )
            loss += err * err / args.batch_size
            for i in range(n):
                grad[i] += 2 * err * x[i] / args.batch_size
        for s, f in enumerate(files):
            part = grad[s * FEATURES_PER_SHARD : (s + 1) * FEATURES_PER_SHARD]
            ask(f, f"PUSH {args.lr} " + " ".join(repr(g) for g in part))
        if args.sleep:
            time.sleep(args.sleep)
        elapsed = max(time.perf_counter() - started, 1e-9)
        print(
            f"{kind} {index} step {step}/{args.steps} loss {loss:.4f} "
            f"samples/s {args.batch_size / elapsed:.1f} steps/s {1 / elapsed:.2f}",
            flush=True,
        )
        save_step(checkpoint, step)
    for c in conns:
        c.close()
    print(f"{kind} {index} done", flush=True)
    return 0


def main() -> int:
    args, extra = parse()
    config = json.loads(os.environ["TF_CONFIG"])
    cluster, task = config["cluster"], config["task"]
    kind, index = task["type"], int(task["index"])
    print(
        f"{kind} {index} cluster {json.dumps(cluster)} extra_args={json.dumps(extra)}", flush=True
    )
    if kind == "ps":
        return serve_ps(index, cluster["ps"][index])
    if kind in ("worker", "chief"):
        return train(kind, index, list(cluster["ps"]), args)
    print(f"unknown task type {kind!r} in TF_CONFIG", file=sys.stderr, flush=True)
    return 2


if __name__ == "__main__":
    sys.exit(main())
