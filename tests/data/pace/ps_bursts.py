"""A parameter-server job driven by TF_CONFIG that knows nothing of distconsole (issue 32's
ps slow-worker test). Standard library only.

A ``ps`` task serves one counter on its port (``PUSH`` -> the updates so far). A
``worker`` computes a fixed amount of pure-Python work per step (``BURST_N`` products,
~0.1-0.2 CPU s), pushes to every ps task, then pauses ``PAUSE_S`` as a data loader would,
and prints ``worker I step N``. The workers never wait for each other: one under a CPU
quota takes longer per step and holds nobody back. The pause keeps three workers from
saturating a 2-core machine, so that the quota, not the machine, makes a worker slow.
Runs until it is stopped.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import sys
import time

BURST_N = int(os.environ.get("BURST_N", "2000000"))
PAUSE_S = float(os.environ.get("BURST_PAUSE_S", "0.3"))


def address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def serve(where: str) -> int:
    updates = [0]

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            for _line in self.rfile:
                updates[0] += 1
                self.wfile.write(f"{updates[0]}\n".encode())

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    socketserver.ThreadingTCPServer.daemon_threads = True
    with socketserver.ThreadingTCPServer(("", address(where)[1]), Handler) as server:
        print(f"ps serving on {where}", flush=True)
        server.serve_forever()
    return 0


def connect(where: str) -> socket.socket:
    deadline = time.monotonic() + 120
    while True:
        try:
            return socket.create_connection(address(where), timeout=60)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def work(index: int, ps: list[str]) -> int:
    files = [connect(a).makefile("rw") for a in ps]
    for step in range(1, 10**9):
        value = sum(i * i for i in range(BURST_N)) % 1000
        for f in files:
            f.write(f"PUSH {value}\n")
            f.flush()
            f.readline()
        time.sleep(PAUSE_S)
        print(f"worker {index} step {step} value {value}", flush=True)
    return 0


def main() -> int:
    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    if task["type"] == "ps":
        return serve(config["cluster"]["ps"][int(task["index"])])
    return work(int(task["index"]), list(config["cluster"]["ps"]))


if __name__ == "__main__":
    sys.exit(main())
