"""PS/async kinds (issue 32): each worker's steps read from its own log on its host
(console/hostprogs/pace/steps.py) and the leader's rate score (score.py's
``basis="steps"``: the median worker's step rate over this worker's), fed as the hosts'
meters send them; the clock is passed in. Plus the words the displays read."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from console.hostprogs.pace.hook import pace_settings
from console.hostprogs.pace.score import PaceBoard
from console.hostprogs.pace.steps import PACE_STEP_PATTERNS, PaceStepMeter, pace_last_step
from console.inventory import load
from console.jobs.plan.planner import plan
from console.jobs.report.slow_ranks import (
    pace_lines,
    period_lines,
    slow_mark,
    slow_ranks,
    slow_words,
)
from console.jobs.spec import make_spec
from console.jobs.ssh.supervision import supervisor_spec
from console.logs.steps import DEFAULT_STEP_PATTERNS


def test_the_host_reads_steps_with_the_consoles_own_patterns() -> None:
    assert PACE_STEP_PATTERNS == DEFAULT_STEP_PATTERNS
    assert pace_last_step(["worker 1 step 7/100 loss 0.3 samples/s 10 steps/s 2.5"]) == 7
    assert pace_last_step(["INFO:root:global_step=40 loss=1.2", "steps/s 3.0"]) == 40
    assert pace_last_step([" 45%|####5     | 450/1000 [00:10<00:12, 44.50it/s]"]) == 450
    assert pace_last_step(["Epoch 2 step 12", "step 9", "eval loss 0.2"]) == 9
    assert pace_last_step(["ps 0 updates 40", "connected"]) is None


def test_a_workers_steps_are_read_from_its_own_files_as_they_grow(tmp_path: Path) -> None:
    out, err = tmp_path / "worker-1.out", tmp_path / "worker-1.err"
    out.write_text("worker 1 cluster {...}\n")
    err.write_text("")
    procs = [
        {"name": "ps-0", "role": "ps", "index": 0, "output": [str(tmp_path / "ps-0.out")]},
        {"name": "worker-1", "role": "worker", "index": 1, "output": [str(out), str(err)]},
    ]
    meter = PaceStepMeter(str(tmp_path), procs)
    assert meter.sample(now=0.0) == []  # no step line yet: not reported
    with out.open("a") as f:
        f.write("worker 1 step 1\nworker 1 step 2\nworker 1 st")  # the last one unfinished
    (first,) = meter.sample(now=1.0)
    assert (first["rank"], first["task"], first["steps"], first["wall_s"]) == (1, "worker 1", 2, 0)
    with out.open("a") as f:
        f.write("ep 3\n")
    with err.open("a") as f:  # Python's logging writes to stderr
        f.write("INFO step=5\n")
    (moved,) = meter.sample(now=4.0)
    assert (moved["steps"], moved["stride"], moved["step_wall_s"], moved["wall_s"]) == (5, 3, 3, 3)
    (still,) = meter.sample(now=6.0)
    assert (still["steps"], still["step_wall_s"], still["wall_s"]) == (5, 3, 5)
    (tmp_path / "worker-1.exit").write_text("0\n")
    assert meter.sample(now=7.0) == []  # ended: no longer scored


def test_the_cause_is_read_for_the_program_the_wrapper_shell_runs(tmp_path: Path) -> None:
    shell = subprocess.Popen(["bash", "-c", "sleep 60; true"], start_new_session=True)
    try:
        (tmp_path / "worker-0.pgid").write_text(f"{shell.pid}\n")
        (tmp_path / "worker-0.out").write_text("worker 0 step 1\n")
        procs = [{"name": "worker-0", "role": "worker", "index": 0}]
        procs[0]["output"] = [str(tmp_path / "worker-0.out")]
        meter = PaceStepMeter(str(tmp_path), procs)
        deadline = time.monotonic() + 30
        while True:
            (item,) = meter.sample()
            children = Path(f"/proc/{shell.pid}/task/{shell.pid}/children").read_text().split()
            if children or time.monotonic() > deadline:
                break
            meter.state["worker-0"]["pid"] = None
            time.sleep(0.1)
        assert item["pid"] == int(children[0]) and item["pid"] != shell.pid
    finally:
        shell.kill()
        shell.wait()


class Workers:
    """Workers on hosts, each printing a step line every ``every`` steps at its rate."""

    def __init__(self, rates: dict[int, float], every: dict[int, int] | None = None) -> None:
        self.rates = rates
        self.every = every or dict.fromkeys(rates, 1)
        self.done = dict.fromkeys(rates, 0.0)
        self.state = {r: {"steps": 0, "step_wall_s": 0.0, "stride": 0} for r in rates}
        self.wall = 0.0

    def run(self, board: PaceBoard, start: float, seconds: int) -> list[dict[str, Any]]:
        changes: list[dict[str, Any]] = []
        for second in range(1, seconds + 1):
            self.wall += 1.0
            for rank, rate in self.rates.items():
                self.done[rank] += rate
                state = self.state[rank]
                printed = int(self.done[rank]) // self.every[rank] * self.every[rank]
                if printed > state["steps"]:
                    state.update(stride=printed - state["steps"], steps=printed)
                    state["step_wall_s"] = self.wall
                figures = {"rank": rank, "task": f"worker {rank}", "wall_s": self.wall, **state}
                board.feed(f"node{rank}", {**figures, "cause": f"cause of {rank}"})
            changes += board.tick(start + second)
        return changes


def test_a_worker_at_half_the_median_rate_for_two_windows_is_slow() -> None:
    board = PaceBoard(window_s=15, threshold=1.3, windows=2, start=0.0, basis="steps")
    workers = Workers({0: 2.0, 1: 2.0, 2: 1.0})
    assert workers.run(board, 0.0, 15) == []  # one window high: not yet
    (change,) = workers.run(board, 15.0, 15)
    assert (change["event"], change["rank"], change["task"]) == ("slow", 2, "worker 2")
    assert change["relative"] == 2.0 and change["since"] == 0.0
    record = board.record()
    assert record["slow_ranks"] == [
        {"rank": 2, "host": "node2", "relative": 2.0, "cause": "cause of 2", "since": 0.0,
         "task": "worker 2", "basis": "steps"}
    ]  # fmt: skip
    pace = {p["rank"]: p for p in record["rank_pace"]}
    assert pace[0] == {
        "rank": 0, "host": "node0", "task": "worker 0", "steps_per_s": 2.0, "relative": 1.0,
        "window_end": 30.0,
    }  # fmt: skip
    assert pace[2]["steps_per_s"] == 1.0
    assert record["slow_periods"][0]["task"] == "worker 2"


def test_sparse_step_lines_at_the_same_rate_name_nobody_and_a_stalled_worker_is_slow() -> None:
    board = PaceBoard(window_s=15, threshold=1.3, windows=2, start=0.0, basis="steps")
    # Worker 2 prints a line every 40 steps (every 20 s): some windows hold none.
    workers = Workers({0: 2.0, 1: 2.0, 2: 2.0}, every={0: 1, 1: 1, 2: 40})
    assert workers.run(board, 0.0, 150) == []
    assert board.record()["slow_periods"] == []
    workers.rates[1] = 0.0  # worker 1 stops making progress, alive
    changes = workers.run(board, 150.0, 45)
    assert [(c["event"], c["rank"]) for c in changes] == [("slow", 1)]
    assert board.record()["slow_ranks"][0]["relative"] >= 1.3


def test_a_worker_that_starts_again_from_step_0_is_not_scored_backwards() -> None:
    board = PaceBoard(window_s=10, threshold=1.3, windows=1, start=0.0, basis="steps")
    workers = Workers({0: 1.0, 1: 1.0, 2: 1.0})
    workers.run(board, 0.0, 20)
    workers.done[1] = 0.0
    workers.state[1] = {"steps": 0, "step_wall_s": workers.wall, "stride": 0}
    assert workers.run(board, 20.0, 20) == []
    assert {p["rank"] for p in board.record()["rank_pace"]} == {0, 1, 2}


def test_a_ps_job_is_scored_and_its_workers_outputs_reach_their_hosts_supervisor(
    tmp_path: Path,
) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        "hosts:\n  - {name: n0, address: 10.0.0.1}\n  - {name: n1, address: 10.0.0.2}\n"
    )
    inventory = load(hosts)
    planned = plan(make_spec(kind="ps", program="t.py", ps=1, workers=2), inventory, job_id="j")
    cfg = supervisor_spec(
        planned, "n1", leader=inventory.hosts[0], leader_port=1, secret="k", grace_s=5
    )["config"]
    assert pace_settings(cfg) is not None
    mine = [p for p in cfg["processes"] if p["host"] == "n1"]
    assert [(p["name"], p["index"]) for p in mine] == [("worker-0", 0)]
    assert [Path(f).name for f in mine[0]["output"]] == ["worker-0.out", "worker-0.err"]
    assert all(p["output"] == [] for p in cfg["processes"] if p["host"] != "n1")


def test_a_slow_worker_reads_as_its_task_with_its_step_time() -> None:
    view = {
        "slow_ranks": [
            {"rank": 1, "host": "node2", "relative": 2.0, "cause": "CPU: quota", "since": 0.0,
             "task": "worker 1", "basis": "steps"}
        ],
        "rank_pace": [
            {"rank": r, "host": f"node{r + 1}", "task": f"worker {r}", "steps_per_s": s,
             "relative": rel, "window_end": 30.0}
            for r, s, rel in ((0, 2.0, 1.0), (1, 1.0, 2.0))
        ],
        "slow_periods": [
            {"rank": 1, "host": "node2", "since": 0.0, "until": None, "cause": "CPU: quota",
             "task": "worker 1", "basis": "steps"}
        ],
    }  # fmt: skip
    (slow,) = slow_ranks(view)
    assert slow_mark([slow]) == "slow: worker 1"
    assert slow_words(slow).startswith("worker 1 on node2 step time 2.0x the median since ")
    table = pace_lines(view)
    assert "STEPS/S" in table[1] and table[-1].split() == ["worker", "1", "node2", "1.00",
                                                            "2.00x", "SLOW"]  # fmt: skip
    assert period_lines(view)[1].startswith("  worker 1 on node2 from ")


def test_a_quiet_spell_at_the_windows_end_is_no_stall_when_the_worker_moved_in_it() -> None:
    """A checkpoint, an evaluation, a late reading: 4 s with no line at the tick, after
    steps at 1 a second. The rate is judged between its lines (1/s); bounding it by the
    quiet spell (1 step in 4 s) read it 4x slow."""
    board = PaceBoard(window_s=15, basis="steps")
    first = {"steps": 10, "step_wall_s": 10.0, "wall_s": 10.0, "stride": 1}
    last = {"steps": 21, "step_wall_s": 21.0, "wall_s": 25.0, "stride": 1}
    assert board.step_rate(first, last) == 1.0
    # No line in the whole window: at most 1 step in the 15 s since the last.
    quiet = {"steps": 21, "step_wall_s": 21.0, "wall_s": 36.0, "stride": 1}
    assert board.step_rate(last, quiet) == 1 / 15
