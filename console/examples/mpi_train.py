"""MPI trainer that needs no MPI library (standard library only): ``--kind mpi``'s default.

Every rank that ``mpirun`` starts finds its place in the launcher's environment (Open
MPI's ``OMPI_COMM_WORLD_RANK``/``_SIZE``, else PMIx's/PMI's, else Slurm's, else rank 0
of 1) and fits a least-squares linear model on its own shard of random data; the ranks
do not exchange gradients (that needs mpi4py or Horovod: ``example:horovod``). What it
shows is what distconsole does for an MPI job: every rank placed on its host, the
environment forwarded (``-x``), the step budget split per rank
(``DISTCONSOLE_STEPS_PER_RANK``), a log per rank, fail-fast, and restarts.

Every step prints ``rank R step N/S loss L samples/s X steps/s Y``; the last line is
``rank R params_checksum=...``. With ``$DISTCONSOLE_CHECKPOINT_DIR`` each rank saves its
step and weights to ``mpi-rank-R.json`` every ``--checkpoint-every`` steps and, re-run
(``--max-restarts``: the launcher host's supervisor runs mpirun again), goes on from
there, printing ``rank R resumed from step K``.

Test knobs as in the other examples: ``--crash-rank R --crash-at-step S`` (rank R exits
3 at step S; ``--crash-once``: not in a run that resumed), ``--sleep`` per step. Unknown
arguments are printed as ``extra_args=[...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import sys
import time

FEATURES = 8
RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")
SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "DISTCONSOLE_WORLD_SIZE")


def parse() -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__)
    default_steps = int(os.environ.get("DISTCONSOLE_STEPS_PER_RANK", "20"))
    parser.add_argument("--steps", type=int, default=default_steps)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep per step")
    parser.add_argument("--crash-rank", type=int, default=-1)
    parser.add_argument("--crash-at-step", type=int, default=-1)
    parser.add_argument("--crash-once", action="store_true", help="not in a resumed run")
    parser.add_argument("--checkpoint-every", type=int, default=5, help="steps; 0: never")
    return parser.parse_known_args()


def first_int(names: tuple[str, ...], default: int) -> int:
    for name in names:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return default


def dot(a: list[float], b: list[float]) -> float:
    return sum(a[i] * b[i] for i in range(len(a)))


def load(path: str) -> tuple[int, list[float]] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            state = json.load(handle)
        return int(state["step"]), [float(w) for w in state["weights"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(path: str, step: int, weights: list[float]) -> None:
    """Written whole then renamed: a crash never leaves half a checkpoint."""
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump({"step": step, "weights": weights}, handle)
    os.replace(path + ".tmp", path)


def main() -> int:
    args, extra = parse()
    rank, size = first_int(RANK_VARS, 0), first_int(SIZE_VARS, 1)
    truth = [((i % 3) - 1) * 0.5 for i in range(FEATURES)]  # the same on every rank
    weights = [0.0] * FEATURES
    first = 0
    directory = os.environ.get("DISTCONSOLE_CHECKPOINT_DIR", "")
    path = os.path.join(directory, f"mpi-rank-{rank}.json") if directory else ""
    if path:
        os.makedirs(directory, exist_ok=True)
        saved = load(path)
        if saved is not None:
            first, weights = saved
            print(f"rank {rank} resumed from step {first}", flush=True)
    print(
        f"rank {rank} size {size} host {socket.gethostname()} steps_per_rank {args.steps} "
        f"total_steps {os.environ.get('DISTCONSOLE_TOTAL_STEPS', '-')} "
        f"extra_args={json.dumps(extra)}",
        flush=True,
    )
    crash = rank == args.crash_rank and not (args.crash_once and first)
    for step in range(first + 1, args.steps + 1):
        started = time.perf_counter()
        if crash and step == args.crash_at_step:
            print(f"rank {rank} crashing at step {step} as asked", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(3)  # as a crash does: no clean-up
        data = random.Random(1000 + rank + 1_000_003 * step)
        grad = [0.0] * FEATURES
        loss = 0.0
        for _ in range(args.batch_size):
            x = [data.gauss(0.0, 1.0) for _ in range(FEATURES)]
            error = dot(weights, x) - dot(truth, x)
            loss += error * error / args.batch_size
            for i, v in enumerate(x):
                grad[i] += 2 * error * v / args.batch_size
        weights = [w - args.lr * grad[i] for i, w in enumerate(weights)]
        if args.sleep:
            time.sleep(args.sleep)
        elapsed = max(time.perf_counter() - started, 1e-9)
        print(
            f"rank {rank} step {step}/{args.steps} loss {loss:.4f} "
            f"samples/s {args.batch_size / elapsed:.1f} steps/s {1 / elapsed:.2f}",
            flush=True,
        )
        if path and args.checkpoint_every > 0 and step % args.checkpoint_every == 0:
            save(path, step, weights)
    print(f"rank {rank} params_checksum={sum(weights):.10f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
