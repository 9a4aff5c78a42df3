"""Tiny Horovod (PyTorch, CPU) trainer for distconsole's example jobs and tests.

Horovod counts steps per rank: with a total budget T over N ranks every rank runs
``T // N`` steps (as Horovod's own examples split it). distconsole hands that share in
``DISTCONSOLE_STEPS_PER_RANK``; ``--steps`` overrides it. Every step prints ``rank R
step N/S loss L samples/s X steps/s Y`` and the last lines are the global step count and
``params_checksum=...`` (equal on every rank).

Horovod elastic (``hvd.elastic.run`` with a ``TorchState``): every
``--checkpoint-every`` steps the state (model, optimizer, step) is committed; when a rank
fails, horovodrun's elastic driver (distconsole runs it so with ``--max-restarts``, see
console/jobs/plan/horovod_elastic.py) starts it again, the survivors restore their last
commit, and every rank goes on from there after a sync from rank 0, printing ``rank R
resumed from step K``. Under a plain horovodrun the same code runs as a normal job.

Checkpoints (distconsole's contract): at each commit rank 0 also saves the state to
``$DISTCONSOLE_CHECKPOINT_DIR/step-K.pt``; at start it loads the newest, so a job re-run
whole (a launcher restarted as an MPI one's, or relaunched) goes on from there too.

Test knobs as in ddp_train.py: ``--crash-rank R --crash-at-step S`` makes rank R exit 3
at step S with ``os._exit`` after flushing (as a crash does); ``--crash-once``: not in a
process that restarted, resumed or lived through a reset; ``--sleep``.
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


def load_newest(model: nn.Module, optimizer: torch.optim.Optimizer, directory: str) -> int:
    """Rank 0 at start: the newest checkpoint's state and step (0: none)."""
    newest = newest_checkpoint(directory)
    if newest is None:
        return 0
    state = torch.load(newest)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["step"])


def save(state: hvd.elastic.TorchState, directory: str) -> None:
    """Written whole then renamed: a crash never leaves half a checkpoint."""
    path = os.path.join(directory, f"step-{state.step:08d}.pt")
    record = {"model": state.model.state_dict(), "optimizer": state.optimizer.state_dict()}
    torch.save(dict(record, step=state.step), path + ".tmp")
    os.replace(path + ".tmp", path)


def main() -> int:
    args, extra = parse()
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size())
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    directory = os.environ.get("DISTCONSOLE_CHECKPOINT_DIR", "")
    first = 0
    if hvd.rank() == 0 and directory:
        os.makedirs(directory, exist_ok=True)
        first = load_newest(model, optimizer, directory)
    # The process's restarts (the rank wrapper counts a slot's starts under Horovod
    # elastic; a launcher re-run sets it for every rank).
    restarts = int(os.environ.get("DISTCONSOLE_RESTART_COUNT") or 0)
    resets: list[int] = []  # resets this process lived through
    state = hvd.elastic.TorchState(model, optimizer, step=first)
    state.register_reset_callbacks([lambda: resets.append(1)])

    @hvd.elastic.run
    def train(state: hvd.elastic.TorchState) -> None:
        # After the sync from rank 0: the step every rank goes on from.
        rank, size = hvd.rank(), hvd.size()
        if state.step:
            print(f"rank {rank} resumed from step {state.step}", flush=True)
        print(
            f"rank {rank} size {size} steps_per_rank {args.steps} "
            f"total_steps {os.environ.get('DISTCONSOLE_TOTAL_STEPS', '-')} "
            f"extra_args={json.dumps(extra)}",
            flush=True,
        )
        crash = rank == args.crash_rank and not (
            args.crash_once and (restarts or state.step or resets)
        )
        data = torch.Generator().manual_seed(1000 + rank + 1_000_003 * state.step)
        while state.step < args.steps:
            step = state.step + 1
            started = time.perf_counter()
            if crash and step == args.crash_at_step:
                print(f"rank {rank} crashing at step {step} as asked", file=sys.stderr, flush=True)
                sys.stdout.flush()
                os._exit(3)  # as a crash: no teardown while peers wait in a collective
            x = torch.randn(args.batch_size, 16, generator=data)
            y = x.sum(dim=1, keepdim=True)
            loss = nn.functional.mse_loss(state.model(x), y)
            state.optimizer.zero_grad()
            loss.backward()
            state.optimizer.step()
            if args.sleep:
                time.sleep(args.sleep)
            elapsed = max(time.perf_counter() - started, 1e-9)
            print(
                f"rank {rank} step {step}/{args.steps} loss {loss.item():.4f} "
                f"samples/s {args.batch_size / elapsed:.1f} steps/s {1 / elapsed:.2f}",
                flush=True,
            )
            state.step = step
            if args.checkpoint_every > 0 and step % args.checkpoint_every == 0:
                if rank == 0 and directory:
                    save(state, directory)
                state.commit()

    train(state)
    done = hvd.allreduce(torch.tensor([float(args.steps)]), op=hvd.Sum, name="steps_done")
    checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    rank = hvd.rank()
    print(f"rank {rank} global_steps={int(done.item())}", flush=True)
    print(f"rank {rank} params_checksum={checksum:.10f}", flush=True)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
