"""Tiny Horovod (PyTorch, CPU) trainer for distconsole's example jobs and tests.

Horovod counts steps per rank: with a total budget T over N ranks every rank runs
``T // N`` steps (as Horovod's own examples split it). distconsole hands that share in
``DISTCONSOLE_STEPS_PER_RANK``; ``--steps`` overrides it. Every step prints ``rank R
step N/S loss L samples/s X steps/s Y`` and the last lines are the global step count and
``params_checksum=...`` (equal on every rank).

Checkpoints (distconsole's contract): rank 0 saves the model and optimizer to
``$DISTCONSOLE_CHECKPOINT_DIR/step-K.pt`` every ``--checkpoint-every`` steps; at start it
loads the newest, broadcasts it and its step, and every rank prints ``rank R resumed from
step K`` (a job re-run by ``--max-restarts`` goes on from there).

Test knobs as in ddp_train.py: ``--crash-rank``, ``--crash-at-step``, ``--crash-once``
(not in a run that resumed or was restarted), ``--sleep``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

import horovod.torch as hvd
import torch
from torch import nn


def parse() -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__)
    default_steps = int(os.environ.get("DISTCONSOLE_STEPS_PER_RANK", "20"))
    parser.add_argument("--steps", type=int, default=default_steps)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep per step")
    parser.add_argument("--crash-rank", type=int, default=-1)
    parser.add_argument("--crash-at-step", type=int, default=-1)
    parser.add_argument("--crash-once", action="store_true", help="not after a restart")
    parser.add_argument("--checkpoint-every", type=int, default=5, help="steps; 0: never")
    return parser.parse_known_args()


def newest_checkpoint(directory: str) -> str | None:
    paths = sorted(glob.glob(os.path.join(directory, "step-*.pt"))) if directory else []
    return paths[-1] if paths else None


def main() -> int:
    args, extra = parse()
    hvd.init()
    torch.set_num_threads(1)
    rank, size = hvd.rank(), hvd.size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    directory = os.environ.get("DISTCONSOLE_CHECKPOINT_DIR", "")
    first = 0
    if rank == 0 and directory:
        os.makedirs(directory, exist_ok=True)
        newest = newest_checkpoint(directory)
        if newest is not None:
            state = torch.load(newest)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            first = int(state["step"])
    first = int(hvd.broadcast_object(first, root_rank=0, name="resume_step"))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    restarts = int(os.environ.get("DISTCONSOLE_RESTART_COUNT") or 0)
    if first:
        print(f"rank {rank} resumed from step {first}", flush=True)
    crash = rank == args.crash_rank and not (args.crash_once and (restarts or first))
    data = torch.Generator().manual_seed(1000 + rank + 1_000_003 * first)
    print(
        f"rank {rank} size {size} steps_per_rank {args.steps} "
        f"total_steps {os.environ.get('DISTCONSOLE_TOTAL_STEPS', '-')} "
        f"extra_args={json.dumps(extra)}",
        flush=True,
    )
    for step in range(first + 1, args.steps + 1):
        started = time.perf_counter()
        if crash and step == args.crash_at_step:
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
        if (
            rank == 0
            and directory
            and args.checkpoint_every > 0
            and step % args.checkpoint_every == 0
        ):
            path = os.path.join(directory, f"step-{step:08d}.pt")
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            torch.save(dict(state, step=step), path + ".tmp")
            os.replace(path + ".tmp", path)
    done = hvd.allreduce(torch.tensor([float(args.steps)]), op=hvd.Sum, name="steps_done")
    checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    print(f"rank {rank} global_steps={int(done.item())}", flush=True)
    print(f"rank {rank} params_checksum={checksum:.10f}", flush=True)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
