"""Tiny PyTorch DDP trainer (gloo, CPU) for distconsole's example jobs and tests.

Run under torchrun. Each rank trains the same small model on its own random batches;
DDP averages the gradients, so every rank ends with the same parameters, and the last
line each rank prints is ``params_checksum=...`` to let a test check that they agree.
Every step prints ``rank R step N/S loss L samples/s X steps/s Y`` (flushed).

Test knobs: ``--crash-rank R --crash-at-step S`` makes rank R exit 3 at step S;
``--sleep SECONDS`` sleeps in every step. Arguments it does not know are printed as
``extra_args=[...]`` (JSON) so quoting can be checked end to end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def parse() -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__)
    default_steps = int(os.environ.get("DISTCONSOLE_STEPS_PER_RANK", "20"))
    parser.add_argument("--steps", type=int, default=default_steps)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep per step")
    parser.add_argument("--crash-rank", type=int, default=-1)
    parser.add_argument("--crash-at-step", type=int, default=-1)
    return parser.parse_known_args()


def main() -> int:
    args, extra = parse()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts them)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    data = torch.Generator().manual_seed(1000 + rank)
    print(
        f"rank {rank} world_size {world} host {os.uname().nodename} extra_args={json.dumps(extra)}",
        flush=True,
    )
    for step in range(1, args.steps + 1):
        started = time.perf_counter()
        if rank == args.crash_rank and step == args.crash_at_step:
            print(f"rank {rank} crashing at step {step} as asked", file=sys.stderr, flush=True)
            return 3
        x = torch.randn(args.batch_size, 16, generator=data)
        y = x.sum(dim=1, keepdim=True)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.sleep:
            time.sleep(args.sleep)
        elapsed = max(time.perf_counter() - started, 1e-9)
        print(
            f"rank {rank} step {step}/{args.steps} loss {loss.item():.4f} "
            f"samples/s {args.batch_size / elapsed:.1f} steps/s {1 / elapsed:.2f}",
            flush=True,
        )
    checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    print(f"rank {rank} params_checksum={checksum:.10f}", flush=True)
    dist.barrier()
    # Tearing gloo down races with a peer still finishing the barrier: one rank in some
    # runs aborted with "terminate called without an active exception" (SIGABRT), even
    # with destroy_process_group after the barrier. Every rank is done: leave without
    # running gloo's destructors.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
