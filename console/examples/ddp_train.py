"""Tiny PyTorch DDP trainer (gloo, CPU) for distconsole's example jobs and tests.

Run under torchrun. Each rank trains the same small model on its own random batches;
DDP averages the gradients, so every rank ends with the same parameters, and the last
line each rank prints is ``params_checksum=...`` to let a test check that they agree.
Every step prints ``rank R step N/S loss L samples/s X steps/s Y`` (flushed).

Checkpoints (distconsole's contract): every ``--checkpoint-every`` steps each host's
first local rank saves the model and optimizer to ``$DISTCONSOLE_CHECKPOINT_DIR``
(``step-K.pt``, the last three kept); at start every rank looks there, the ranks agree
on the newest step they all have, load it and print ``rank R resumed from step K``.
Under torchrun the restart's number is ``TORCHELASTIC_RESTART_COUNT``; it is copied to
``DISTCONSOLE_RESTART_COUNT``.

Test knobs: ``--crash-rank R --crash-at-step S`` makes rank R exit 3 at step S (with
``--crash-once``: only in a run that started from scratch, not after a restart or a
resume); ``--sleep SECONDS`` sleeps in every step. Arguments it does not know are printed as
``extra_args=[...]`` (JSON) so quoting can be checked end to end.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import sys
import time
from typing import Any

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
    parser.add_argument("--crash-once", action="store_true", help="not after a restart")
    parser.add_argument("--checkpoint-every", type=int, default=5, help="steps; 0: never")
    return parser.parse_known_args()


def restart_count() -> int:
    """torchrun's count of restarts (its workers), else distconsole's (the wrapper's)."""
    count = os.environ.get("TORCHELASTIC_RESTART_COUNT") or os.environ.get(
        "DISTCONSOLE_RESTART_COUNT", "0"
    )
    os.environ["DISTCONSOLE_RESTART_COUNT"] = count
    return int(count)


def agreed(restarts: int) -> int:
    """The job's restart number, the same on every rank. torchrun counts per agent: the
    agent whose worker failed counts a restart, its peers restart their workers for the
    new round without counting one, so their ranks would read "restart 0"."""
    highest = torch.tensor([restarts])
    dist.all_reduce(highest, op=dist.ReduceOp.MAX)
    count = int(highest.item())
    os.environ["DISTCONSOLE_RESTART_COUNT"] = str(count)
    return count


def checkpoint_steps(directory: str) -> list[int]:
    steps = []
    for path in glob.glob(os.path.join(directory, "step-*.pt")):
        stem = os.path.basename(path)[len("step-") : -len(".pt")]
        if stem.isdigit():
            steps.append(int(stem))
    return sorted(steps)


def resume(directory: str, model: nn.Module, optimizer: Any) -> int:
    """The newest step every rank has a checkpoint of (0: none), loaded."""
    newest = max(checkpoint_steps(directory), default=0) if directory else 0
    agreed = torch.tensor([newest])
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
    step = int(agreed.item())
    if step:
        state = torch.load(os.path.join(directory, f"step-{step:08d}.pt"))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    return step


def save(directory: str, step: int, model: nn.Module, optimizer: Any) -> None:
    """Written whole then renamed (a crash never leaves half a checkpoint); 3 kept. On
    shared storage every host writes the same (identical) file: each its own temporary."""
    path = os.path.join(directory, f"step-{step:08d}.pt")
    tmp = f"{path}.{os.uname().nodename}.{os.getpid()}.tmp"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, tmp)
    os.replace(tmp, path)
    for old in checkpoint_steps(directory)[:-3]:
        with contextlib.suppress(FileNotFoundError):  # another host's rank removed it
            os.unlink(os.path.join(directory, f"step-{old:08d}.pt"))


def main() -> int:
    args, extra = parse()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts them)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    restarts = agreed(restart_count())
    directory = os.environ.get("DISTCONSOLE_CHECKPOINT_DIR", "")
    if directory:
        os.makedirs(directory, exist_ok=True)
    first = resume(directory, model.module, optimizer)
    # The batches of a resumed run: their own seed, the same on every restart.
    data = torch.Generator().manual_seed(1000 + rank + 1_000_003 * first)
    print(
        f"rank {rank} world_size {world} host {os.uname().nodename} restart {restarts} "
        f"extra_args={json.dumps(extra)}",
        flush=True,
    )
    if first:
        print(f"rank {rank} resumed from step {first}", flush=True)
    saver = directory and os.environ.get("LOCAL_RANK", "0") == "0"
    crash = rank == args.crash_rank and not (args.crash_once and (restarts or first))
    for step in range(first + 1, args.steps + 1):
        started = time.perf_counter()
        if crash and step == args.crash_at_step:
            print(f"rank {rank} crashing at step {step} as asked", file=sys.stderr, flush=True)
            sys.stdout.flush()
            # As a crash does: no interpreter teardown, whose process-group destructor
            # can abort (SIGABRT) while peers wait in a collective, hiding the status.
            os._exit(3)
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
        if saver and args.checkpoint_every > 0 and step % args.checkpoint_every == 0:
            save(directory, step, model.module, optimizer)
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
