"""A compute-bound gloo DDP training loop that knows nothing of distconsole (issue 32's
slow-rank tests and bench/slow_ranks.py).

Each step computes in a burst (``MICRO`` forward/backward passes of a small MLP on one
thread, gradients accumulated without a collective), then one backward whose gradients
DDP all-reduces, then waits ``PAUSE_S`` as a data loader would. The pause keeps several
jobs' ranks on a 2-core machine from saturating it, so that a CPU quota, not the
machine, is what makes a rank slow. Prints ``step N step_time S`` every 10 steps.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

MICRO = int(os.environ.get("BURST_MICRO", "80"))
PAUSE_S = float(os.environ.get("BURST_PAUSE_S", "0.6"))

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
model = DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
batch = torch.randn(128, 256)
started = time.monotonic()
for step in range(1, 10**9):
    with model.no_sync():
        for _ in range(MICRO - 1):
            model(batch).square().mean().backward()
    loss = model(batch).square().mean()
    loss.backward()  # the all-reduce: every rank waits here for the slowest
    optimizer.step()
    optimizer.zero_grad()
    time.sleep(PAUSE_S)
    if step % 10 == 0:
        now = time.monotonic()
        print(
            f"rank {rank} step {step} loss {loss.item():.4f} step_time {(now - started) / 10:.4f}",
            flush=True,
        )
        started = now
