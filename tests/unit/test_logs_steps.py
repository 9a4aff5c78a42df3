"""Step/throughput patterns, per-job progress, stalls and the bounded store."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from console.jobs.models import LogFile, RankLaunch
from console.logs.buffer import Gap, LogStore, Shown, compile_search, filter_with_context
from console.logs.models import LogLine
from console.logs.prefixes import attribute, context_for
from console.logs.stalls import StallConfig, find_stalls
from console.logs.steps import StepPatterns, StepTracker, gpu_util_by_rank


def line(rank: int | None, text: str, at: float = 0.0, host: str = "node0") -> LogLine:
    return LogLine("job", host, rank, rank, "stdout", text, at)


@pytest.mark.parametrize(
    ("text", "step", "epoch", "total"),
    [
        ("Epoch 3 step 40 loss 0.1", 40, 3, None),
        ("epoch: 1, step: 7", 7, 1, None),
        ("Epoch [3/10] Step [120/500] loss=1.5", 120, 3, 500),
        ("global_step=812 lr=0.1", 812, None, None),
        ("Step 40/1000", 40, None, 1000),
        ("Iteration 17/300, loss 2.3", 17, None, 300),
        ("iter 9 loss 0.5 img/sec 50", 9, None, None),
        # tqdm's default bar format (tqdm is not installed here; this is its documented layout)
        (" 45%|####5     | 450/1000 [00:10<00:12, 44.50it/s]", 450, None, 1000),
    ],
)
def test_step_patterns(text: str, step: int, epoch: int | None, total: int | None) -> None:
    tracker = StepTracker()
    tracker.feed([line(0, text)])
    r = tracker.rank(0)
    assert r is not None and (r.step, r.epoch, r.total) == (step, epoch, total)


def test_throughput_and_loss_forms() -> None:
    tracker = StepTracker()
    tracker.feed([line(0, "step 1 loss: 2.5e-1 samples/s: 1234.5")])
    tracker.feed([line(1, "step 1 Img/sec per GPU: 98.7 +-1.2")])
    tracker.feed([line(2, "step 1 done, 640 samples/sec")])
    tracker.feed([line(3, " 45%|####5     | 450/1000 [00:10<00:12, 2.50s/it]")])
    # Horovod's total line would double count: it is not a per-rank figure
    tracker.feed([line(4, "Total img/sec on 8 GPU(s): 800.0 +-3.0")])
    r = {k: tracker.rank(k) for k in range(5)}
    assert r[0] is not None and (r[0].loss, r[0].samples_per_s) == (0.25, 1234.5)
    assert r[1] is not None and r[1].samples_per_s == 98.7
    assert r[2] is not None and r[2].samples_per_s == 640.0
    assert r[3] is not None and r[3].steps_per_s == pytest.approx(0.4)
    assert r[4] is not None and r[4].samples_per_s is None


def test_custom_patterns_replace_the_defaults() -> None:
    tracker = StepTracker(StepPatterns(step=(r"it=(?P<step>\d+)",)))
    tracker.feed([line(0, "it=12 step 99")])
    r = tracker.rank(0)
    assert r is not None and r.step == 12


def test_rates_sums_and_lag_across_ranks() -> None:
    tracker = StepTracker()
    for t in range(0, 11):
        tracker.feed([line(0, f"step {t * 10}", at=100.0 + t)])  # 10 steps/s
        tracker.feed([line(1, f"step {t * 5}", at=100.0 + t)])  # 5 steps/s: lagging
    job = tracker.job(total_steps=400)
    r0, r1 = tracker.rank(0), tracker.rank(1)
    assert r0 is not None and r0.steps_per_s == pytest.approx(10.0)
    assert r1 is not None and r1.steps_per_s == pytest.approx(5.0)
    assert r0.step_interval_s == pytest.approx(1.0)
    assert (job.sum_steps, job.rank0_step, job.total_steps) == (150, 100, 400)
    assert (job.slowest, job.slowest_lag) == (1, 50)


def test_only_the_last_step_of_a_batch_counts() -> None:
    tracker = StepTracker()
    tracker.feed([line(0, f"step {i}", at=5.0) for i in range(1, 1001)] + [line(0, "done", at=5.0)])
    r = tracker.rank(0)
    assert r is not None and r.step == 1000 and r.last_line_at == 5.0


def test_stalled_rank_is_flagged_unless_its_gpu_is_busy() -> None:
    tracker = StepTracker()
    for t in range(5):
        tracker.feed([line(0, f"step {t}", at=float(t)), line(1, f"step {t}", at=float(t))])
    tracker.feed([line(0, "step 5", at=30.0)])  # rank 1 went silent after t=4
    ranks = tracker.ranks()
    stalls = find_stalls(ranks, now=31.0)
    assert [s.key for s in stalls] == [1]
    assert stalls[0].silent_s == pytest.approx(27.0)
    assert "stalled" in stalls[0].describe()
    # The monitor says rank 1's GPU is busy (local rank 1 -> GPU 1): not stalled.
    util = gpu_util_by_rank(ranks, {("node0", 0): 0.0, ("node0", 1): 97.0})
    assert find_stalls(ranks, now=31.0, gpu_util=util) == []
    # Idle GPU: flagged, with the utilisation reported.
    util = gpu_util_by_rank(ranks, {("node0", 1): 0.0})
    assert [s.gpu_util for s in find_stalls(ranks, now=31.0, gpu_util=util)] == [0.0]
    # Factor and minimum silence are configurable.
    assert find_stalls(ranks, now=31.0, config=StallConfig(factor=50, min_silence_s=5)) == []
    with pytest.raises(ValueError, match="factor"):
        StallConfig(factor=0.5)


def test_store_bounds_memory_and_interleaves_by_arrival() -> None:
    store = LogStore(max_lines_per_rank=3)
    store.add([line(0, "a0"), line(1, "b0"), line(0, "a1")])
    store.add([line(0, "a2"), line(0, "a3"), line(1, "b1")])
    assert [ln.text for ln in store.lines()] == ["b0", "a1", "a2", "a3", "b1"]
    assert [ln.text for ln in store.lines([1])] == ["b0", "b1"]
    assert store.dropped(0) == 1 and store.total_received == 6 and len(store) == 5
    assert store.ranks() == [0, 1]


def test_first_error_across_ranks_survives_eviction() -> None:
    store = LogStore(max_lines_per_rank=2)
    store.add([line(0, "step 1"), line(1, "step 1")])
    store.add([line(1, "RuntimeError: NCCL error: unhandled system error"), line(0, "ok")])
    store.add([line(0, "Traceback (most recent call last):")])
    store.add([line(1, f"x{i}") for i in range(5)])
    assert store.first_error is not None and store.first_error.rank == 1
    assert "NCCL error" in store.first_error.text


def test_search_and_filter_with_context() -> None:
    lines = [line(0, f"l{i}" + (" LOSS" if i in (2, 3, 9) else "")) for i in range(12)]
    store = LogStore()
    store.add(lines)
    assert store.search("loss") == [2, 3, 9]  # case-insensitive
    shown = filter_with_context(lines, "loss", context=1)
    kinds = [
        ("gap", p.skipped) if isinstance(p, Gap) else (p.line.text.split()[0], p.match)
        for p in shown
    ]
    assert kinds == [
        ("gap", 1),
        ("l1", False),
        ("l2", True),
        ("l3", True),
        ("l4", False),
        ("gap", 3),
        ("l8", False),
        ("l9", True),
        ("l10", False),
        ("gap", 1),
    ]
    assert all(isinstance(p, Shown) for p in filter_with_context(lines, "l", context=2))
    with pytest.raises(ValueError, match="invalid regular expression"):
        compile_search("(unclosed")


def test_printed_steps_per_second_forms() -> None:
    tracker = StepTracker()
    tracker.feed([line(0, "rank 0 step 3/20 loss 0.5 samples/s 2890.2 steps/s 90.32")])
    tracker.feed([line(1, "global_step/sec: 3.25")])
    tracker.feed([line(2, "step 9 12.5 steps/s")])
    rates = [r.steps_per_s for r in tracker.ranks()]
    assert rates == [pytest.approx(90.32), pytest.approx(3.25), pytest.approx(12.5)]
    r0 = tracker.rank(0)
    assert r0 is not None and (r0.step, r0.total, r0.samples_per_s) == (3, 20, 2890.2)


def test_newest_figures_found_far_back_behind_lines_that_only_look_alike() -> None:
    # The figures are on the first lines; thousands of characters after them hold the
    # patterns' hints ("steps/s", "samples/s", "loss") without a number to read.
    noise = [
        line(0, f"note {i}: steps/s and samples/s pending, loss n/a", at=2.0) for i in range(200)
    ]
    tracker = StepTracker()
    tracker.feed([line(0, "step 7 loss 0.25 samples/s 100.5 12.5 steps/s", at=1.0), *noise])
    r = tracker.rank(0)
    assert r is not None
    assert (r.step, r.loss, r.samples_per_s, r.steps_per_s) == (7, 0.25, 100.5, 12.5)
    # The newest of several matching lines counts, in one run and across runs.
    tracker.feed([line(0, f"step {i} loss {i / 10} 3.5 steps/s", at=3.0) for i in (8, 9)] + noise)
    r = tracker.rank(0)
    assert r is not None and (r.step, r.loss) == (9, 0.9)


def test_figures_read_when_lowercasing_changes_the_text_length() -> None:
    # "İ" lowercases to two characters: positions in the lowercased text no longer agree.
    tracker = StepTracker()
    tracker.feed([line(0, "İ step 11 loss 0.5 samples/s 3.0 2.5 steps/s"), line(0, "İİ done")])
    r = tracker.rank(0)
    assert r is not None
    assert (r.step, r.loss, r.samples_per_s, r.steps_per_s) == (11, 0.5, 3.0, 2.5)


# -- the bundled examples, run for real: what they print is what the parser reads -------

EXAMPLES = Path(__file__).resolve().parents[2] / "console" / "examples"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ps_example_output(workers: int, steps: int) -> list[str]:
    """stdout of each worker of the PS example (one ps task), run here on loopback."""
    cluster = {
        "ps": [f"127.0.0.1:{_free_port()}"],
        "worker": [f"127.0.0.1:{_free_port()}" for _ in range(workers)],
    }
    program = [sys.executable, str(EXAMPLES / "ps_train.py"), "--steps", str(steps)]

    def env(kind: str, index: int) -> dict[str, str]:
        config = {"cluster": cluster, "task": {"type": kind, "index": index}}
        return dict(os.environ, TF_CONFIG=json.dumps(config))

    ps = subprocess.Popen(program, env=env("ps", 0), stdout=subprocess.DEVNULL)
    try:
        runs = [
            subprocess.Popen(program, env=env("worker", i), stdout=subprocess.PIPE, text=True)
            for i in range(workers)
        ]
        outputs = [run.communicate(timeout=60)[0] for run in runs]
        assert all(run.returncode == 0 for run in runs)
    finally:
        ps.terminate()
        ps.wait(timeout=10)
    return outputs


def test_ps_example_output_gives_steps_per_second_and_lag() -> None:
    outputs = _ps_example_output(workers=2, steps=6)
    assert "worker 0 step 6/6 loss" in outputs[0]
    tracker = StepTracker()
    # A fast job's lines all arrive in one batch: no rate can be measured from arrival
    # times, so the rate must come from what the example prints.
    tracker.feed(
        [
            LogLine("job", "node0", None, None, "stdout", text, 5.0, "worker", index)
            for index, out in enumerate(outputs)
            for text in out.splitlines()
        ]
    )
    ranks = tracker.ranks()
    assert [r.step for r in ranks] == [6, 6]
    assert all(r.steps_per_s is not None and r.steps_per_s > 0 for r in ranks)
    assert all(r.samples_per_s is not None and r.loss is not None for r in ranks)
    job = tracker.job()
    assert (job.total_steps, job.slowest_lag) == (6, 0)


@pytest.mark.slow
def test_ddp_example_under_torchrun_gives_steps_per_second() -> None:
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.exists():
        pytest.skip("torchrun is not installed in this venv")
    argv = [str(torchrun), "--nproc-per-node", "2", "--tee", "3"]
    argv += ["--master-port", str(_free_port()), str(EXAMPLES / "ddp_train.py"), "--steps", "4"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    launch = RankLaunch("node0", "torchrun", 0, ("torchrun",), {}, "~", (), (0, 1))
    log = LogFile(path="/j/torchrun-0.out", stream="stdout", role="launcher")
    lines = attribute(context_for("job", "node0", log, launch), proc.stdout.splitlines(), 5.0)
    tracker = StepTracker()
    tracker.feed(lines)
    ranks = tracker.ranks()
    assert [(r.key, r.step, r.total) for r in ranks] == [(0, 4, 4), (1, 4, 4)]
    assert all(r.steps_per_s is not None and r.steps_per_s > 0 for r in ranks)
