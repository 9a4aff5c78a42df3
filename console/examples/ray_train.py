"""Ray driver that uses every node of the cluster (``example:ray``; needs ``ray``).

Connects to ``RAY_ADDRESS`` (the job's head), checks that ``DISTCONSOLE_RAY_NODES``
nodes are alive, then runs steps: each step pins one task to every node
(``NodeAffinitySchedulingStrategy``, hard) and adds a batch of ``SPREAD`` tasks, each
computing a least-squares gradient on its own random batch; the driver averages them
and prints ``step N/S loss L steps/s X nodes IP,IP`` with the IP each pinned task
reported. At the end it prints one ``node IP ran K tasks`` line per node and exits 0.

Test knobs: ``--sleep SECONDS`` per task (a long job to stop), ``--fail-at-step S``
(the driver raises at step S: exit 1 with a traceback). Unknown arguments are printed
as ``extra_args=[...]``.
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import random
import sys
import time
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

FEATURES = 8
TRUE_WEIGHTS = [0.5 * (i + 1) for i in range(FEATURES)]


def parse() -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__)
    default_steps = int(os.environ.get("DISTCONSOLE_TOTAL_STEPS", "5"))
    parser.add_argument("--steps", type=int, default=default_steps)
    parser.add_argument("--spread", type=int, default=4, help="SPREAD tasks per step")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds per task")
    parser.add_argument("--fail-at-step", type=int, default=-1)
    return parser.parse_known_args()


@ray.remote(num_cpus=0.5)
def gradient(
    weights: list[float], batch_size: int, seed: int, sleep: float
) -> tuple[str, list[float], float]:
    """(this node's IP, the batch's gradient, its loss) for y = TRUE_WEIGHTS . x."""
    rng = random.Random(seed)
    grad = [0.0] * FEATURES
    loss = 0.0
    for _ in range(batch_size):
        x = [rng.uniform(-1, 1) for _ in range(FEATURES)]
        err = sum(w * v for w, v in zip(weights, x, strict=True)) - sum(
            t * v for t, v in zip(TRUE_WEIGHTS, x, strict=True)
        )
        loss += err * err / batch_size
        for i, v in enumerate(x):
            grad[i] += 2 * err * v / batch_size
    if sleep > 0:
        time.sleep(sleep)
    return ray.util.get_node_ip_address(), grad, loss


def alive_nodes() -> list[dict[str, Any]]:
    return [n for n in ray.nodes() if n["Alive"]]


def main() -> int:
    args, extra = parse()
    if extra:
        print(f"extra_args={extra}", flush=True)
    ray.init(logging_level=logging.ERROR)
    nodes = alive_nodes()
    want = int(os.environ.get("DISTCONSOLE_RAY_NODES", "1"))
    ips = sorted(n["NodeManagerAddress"] for n in nodes)
    print(f"ray {ray.__version__}: {len(nodes)} nodes alive: {', '.join(ips)}", flush=True)
    if len(nodes) < want:
        print(f"expected {want} nodes, {len(nodes)} alive", file=sys.stderr, flush=True)
        return 2
    weights = [0.0] * FEATURES
    ran: collections.Counter[str] = collections.Counter()
    started = time.monotonic()
    for step in range(1, args.steps + 1):
        if step == args.fail_at_step:
            raise RuntimeError(f"--fail-at-step {step}: the driver fails on purpose")
        pinned = [
            gradient.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote(weights, args.batch_size, step * 1000 + k, args.sleep)
            for k, n in enumerate(nodes)
        ]
        spread = [
            gradient.options(scheduling_strategy="SPREAD").remote(
                weights, args.batch_size, step * 1000 + 500 + k, args.sleep
            )
            for k in range(args.spread)
        ]
        results = ray.get(pinned + spread)
        for ip, _grad, _loss in results:
            ran[ip] += 1
        grads = [grad for _ip, grad, _loss in results]
        loss = sum(loss for _ip, _grad, loss in results) / len(results)
        weights = [
            w - args.lr * sum(g[i] for g in grads) / len(grads) for i, w in enumerate(weights)
        ]
        rate = step / max(time.monotonic() - started, 1e-9)
        pinned_ips = ",".join(ip for ip, _grad, _loss in results[: len(pinned)])
        print(
            f"step {step}/{args.steps} loss {loss:.4f} steps/s {rate:.2f} nodes {pinned_ips}",
            flush=True,
        )
    for ip in sorted(ran):
        print(f"node {ip} ran {ran[ip]} tasks", flush=True)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
