"""Rank attribution and step extraction on output of REAL launchers run here:
torchrun (CPU, gloo, --tee 3) and Open MPI's mpirun --tag-output."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from console.jobs.models import LogFile, RankLaunch, Stream
from console.logs.models import rank_key
from console.logs.prefixes import (
    FileAttribution,
    FileContext,
    attribute,
    context_for,
    guess_context,
)
from console.logs.steps import StepTracker

VENV_BIN = Path(sys.executable).parent
TORCHRUN = VENV_BIN / "torchrun"

TRAINER = """
import os, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.ones(1)
for step in range(1, 6):
    dist.all_reduce(t)
    print(f"Epoch 0 step {step} loss {1.0 / step:.4f} samples/s {100.0 * (rank + 1):.1f}",
          flush=True)
print(f"rank {rank} of {world} on stderr", file=sys.stderr, flush=True)
dist.barrier()
if rank == 1:
    raise RuntimeError("deliberate failure on rank 1")
"""

# Every line goes out in one write (os.write): mpirun tags each write, and a line split
# over two writes (print's text, then its newline) is forwarded as two pieces whose
# layout depends on timing (another rank's output between them, or the tag alone on a
# line), which made this test flaky under load.
MPI_PROGRAM = """
import os, sys
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
for i in range(1, 4 + rank):
    os.write(1, f"iter {i} loss {0.5 / i:.3f} img/sec {50 * (rank + 1)}\\n".encode())
os.write(2, f"err line rank {rank}\\n".encode())
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def torchrun_output(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    if not TORCHRUN.exists():
        pytest.skip("torchrun is not installed in this venv")
    work = tmp_path_factory.mktemp("torchrun")
    (work / "train.py").write_text(TRAINER)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [
            str(TORCHRUN),
            "--nnodes",
            "1",
            "--nproc-per-node",
            "2",
            "--tee",
            "3",
            "--master-port",
            str(free_port()),
            "train.py",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode != 0, "rank 1 raises on purpose"
    return proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def mpirun_output(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI's mpirun is not installed")
    work = tmp_path_factory.mktemp("mpirun")
    (work / "prog.py").write_text(MPI_PROGRAM)
    argv = ["mpirun", "--tag-output", "-np", "2"]
    if os.geteuid() == 0:
        argv += ["--allow-run-as-root", "--oversubscribe"]
    proc = subprocess.run(
        [*argv, sys.executable, "prog.py"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, proc.stderr


def torchrun_ctx(stream: Stream, node_ranks: tuple[int, ...] = (0, 1)) -> FileContext:
    launch = RankLaunch(
        host="node0",
        role="torchrun",
        index=0,
        argv=("torchrun", "--nnodes", "1", "--nproc-per-node", "2", "--node-rank", "0"),
        env={"NODE_RANK": "0"},
        cwd="~",
        log_paths=(),
        ranks=node_ranks,
    )
    log = LogFile(path=f"/j/torchrun-0.{stream[3:]}", stream=stream, role="launcher")
    return context_for("job1", "node0", log, launch)


@pytest.mark.slow
def test_torchrun_tee_prefixes_give_global_ranks(torchrun_output: tuple[str, str]) -> None:
    stdout, _stderr = torchrun_output
    lines = attribute(torchrun_ctx("stdout"), stdout.splitlines(), 1.0)
    steps = [line for line in lines if "step" in line.text]
    assert len(steps) == 10
    assert {line.rank for line in steps} == {0, 1}
    for line in steps:
        assert line.local_rank == line.rank
        assert not line.text.startswith("[")  # prefix removed
        assert line.stream == "stdout"
    # Second node: its local ranks 0, 1 are global ranks 2, 3 (from RankLaunch.ranks).
    second = attribute(torchrun_ctx("stdout", (2, 3)), stdout.splitlines(), 1.0)
    assert {line.rank for line in second if "step" in line.text} == {2, 3}


@pytest.mark.slow
def test_torch_error_prefix_is_the_global_rank(torchrun_output: tuple[str, str]) -> None:
    _stdout, stderr = torchrun_output
    lines = attribute(torchrun_ctx("stderr"), stderr.splitlines(), 1.0)
    boom = [line for line in lines if "deliberate failure" in line.text]
    assert boom, stderr
    assert all(line.rank == 1 for line in boom)
    tracebacks = [line for line in lines if line.text.startswith("Traceback")]
    assert any(line.rank == 1 for line in tracebacks)
    # torchrun's own report carries no prefix: attributed to the launcher, not a rank
    own = [line for line in lines if "ChildFailedError" in line.text]
    assert own and all(line.rank is None and rank_key(line) == "launcher@node0" for line in own)


@pytest.mark.slow
def test_steps_from_real_torchrun_output(torchrun_output: tuple[str, str]) -> None:
    stdout, _ = torchrun_output
    tracker = StepTracker()
    lines = attribute(torchrun_ctx("stdout"), stdout.splitlines(), 10.0)
    tracker.feed(lines)
    r0, r1 = tracker.rank(0), tracker.rank(1)
    assert r0 is not None and r1 is not None
    assert (r0.step, r0.epoch, r1.step) == (5, 0, 5)
    assert r0.samples_per_s == 100.0 and r1.samples_per_s == 200.0
    assert r0.loss == pytest.approx(0.2)
    job = tracker.job()
    assert (job.sum_steps, job.rank0_step, job.samples_per_s) == (10, 5, 300.0)
    assert job.slowest_lag == 0


@pytest.mark.mpi
def test_mpirun_tag_output(mpirun_output: tuple[str, str]) -> None:
    stdout, stderr = mpirun_output
    ctx = guess_context("job1", "node0", "/j/launcher-0.out")
    lines = attribute(ctx, stdout.splitlines() + stderr.splitlines(), 2.0)
    assert {line.rank for line in lines} == {0, 1}
    errs = [line for line in lines if line.stream == "stderr"]
    assert sorted((line.rank, line.text) for line in errs) == [
        (0, "err line rank 0"),
        (1, "err line rank 1"),
    ]
    assert all(line.text.startswith("iter") for line in lines if line.stream == "stdout")


@pytest.mark.mpi
def test_steps_from_real_mpirun_output_horovod_style(mpirun_output: tuple[str, str]) -> None:
    stdout, _ = mpirun_output
    ctx = guess_context("job1", "node0", "/j/launcher-0.out")
    tracker = StepTracker()
    tracker.feed(attribute(ctx, stdout.splitlines(), 3.0))
    job = tracker.job()
    # rank 0 printed iter 1..3, rank 1 iter 1..4: per-GPU counters add up.
    assert job.rank0_step == 3
    assert job.sum_steps == 7
    assert job.slowest == 0 and job.slowest_lag == 1
    assert job.samples_per_s == 150.0  # img/sec 50 + 100


def test_guess_context_follows_the_job_dir_layout() -> None:
    torch_file = "~/w/.distconsole/jobs/j/torchrun/abc_1/attempt_0/1/stderr.log"
    ctx = guess_context("j", "node1", torch_file, node_ranks=(2, 3))
    assert (ctx.rank, ctx.local_rank, ctx.stream) == (3, 1, "stderr")
    ctx = guess_context("j", "node0", "/w/.distconsole/jobs/j/ranks/1/rank.5/stdout")
    assert (ctx.rank, ctx.stream) == (5, "stdout")
    ctx = guess_context("j", "node0", "/w/.distconsole/jobs/j/worker-2.err")
    assert (ctx.role, ctx.task_index, ctx.rank, ctx.stream) == ("worker", 2, None, "stderr")
    ctx = guess_context("j", "node0", "/w/.distconsole/jobs/j/launcher-0.out")
    assert (ctx.role, ctx.rank) == ("launcher", None)


def test_prefix_lookalikes_are_left_alone() -> None:
    ctx = guess_context("j", "n", "/j/launcher-0.out")
    lines = attribute(ctx, ["[INFO] started", "[1,x]<stdout>:no", "[12]: list"], 0.0)
    assert [line.text for line in lines] == ["[INFO] started", "[1,x]<stdout>:no", "[12]: list"]
    assert all(line.rank is None for line in lines)


@pytest.fixture(scope="module")
def horovodrun_output(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The bundled Horovod example under a real ``horovodrun --gloo -np 2``: the
    launcher's combined stdout and the ``--output-filename`` directory of rank files."""
    horovodrun = VENV_BIN / "horovodrun"
    if not horovodrun.exists():
        pytest.skip("horovod is not installed (scripts/build-horovod.sh builds it)")
    from console.examples import example_source

    work = tmp_path_factory.mktemp("horovodrun")
    (work / "hvd.py").write_bytes(example_source("horovod_train.py"))
    env = dict(os.environ, OMP_NUM_THREADS="1", DISTCONSOLE_STEPS_PER_RANK="3")
    env["PATH"] = f"{VENV_BIN}:{env['PATH']}"
    proc = subprocess.run(
        [str(horovodrun), "--gloo", "-np", "2", "-H", "localhost:2",
         "--output-filename", str(work / "ranks"), sys.executable, "hvd.py"],
        cwd=work, capture_output=True, text=True, timeout=180, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, work / "ranks"


@pytest.mark.horovod
def test_horovodrun_launcher_output_gives_ranks_and_per_gpu_steps(
    horovodrun_output: tuple[str, Path],
) -> None:
    stdout, _ranks = horovodrun_output
    ctx = guess_context("job1", "node0", "/j/launcher-0.out")
    lines = attribute(ctx, stdout.splitlines(), 5.0)
    steps = [line for line in lines if " step " in line.text]
    assert {line.rank for line in steps} == {0, 1}
    assert all(line.text.startswith(f"rank {line.rank} step") for line in steps)
    tracker = StepTracker()
    tracker.feed(lines)
    job = tracker.job()
    # Horovod counts steps per GPU: each of the 2 ranks ran its 3-step share.
    assert (job.rank0_step, job.sum_steps) == (3, 6)


@pytest.mark.horovod
def test_horovodrun_rank_files_lose_their_tag(horovodrun_output: tuple[str, Path]) -> None:
    _stdout, ranks = horovodrun_output
    path = ranks / "rank.1" / "stdout"
    raw = path.read_text()
    assert raw.startswith("[1]<stdout>:")  # what horovodrun really writes
    attribution = FileAttribution(guess_context("job1", "node0", str(path)))
    runs = attribution.runs(raw, 5.0)
    texts = [t for run in runs for t in run.texts()]
    assert texts and all(not t.startswith("[") for t in texts if t)
    assert "rank 1 step 3/3" in " ".join(texts)
    tracker = StepTracker()
    tracker.feed(line for run in runs for line in run.lines())
    rank1 = tracker.rank(1)
    assert rank1 is not None and rank1.step == 3
