"""--max-restarts: the policy's restart rule (console/hostprogs/supervisor/policy.py), the
restart part's readers of torchrun's files (supervisor/restart.py), and the plans and
options that carry it (ddp's c10d rendezvous, mpirun's -x, the checkpoint directory)."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from console.errors import JobSpecError
from console.export.sbatch import sbatch_export
from console.export.shape import job_shape
from console.hostprogs.supervisor import hang_sitecustomize
from console.hostprogs.supervisor.policy import (
    JobPolicy,
    PolicyProcess,
    ProcessEnded,
    StopAsked,
)
from console.hostprogs.supervisor.restart import (
    sv_restart_reason,
    sv_start_wrapper,
    sv_torchrun_attempt,
    sv_torchrun_failure,
)
from console.hostprogs.supervisor.source import supervisor_source
from console.inventory import Inventory, load
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec

MPI = [PolicyProcess("node0", "launcher-0", "launcher", (0, 1))]
PS = [
    PolicyProcess("node0", "ps-0", "ps"),
    PolicyProcess("node0", "worker-0", "worker"),
    PolicyProcess("node1", "worker-1", "worker"),
]
DDP = [
    PolicyProcess("node0", "torchrun-0", "torchrun", (0, 1)),
    PolicyProcess("node1", "torchrun-1", "torchrun", (2, 3)),
]


def test_mpirun_is_restarted_up_to_max_then_fails_fast() -> None:
    policy = JobPolicy(list(MPI), "mpi", max_restarts=2)
    first = ProcessEnded("node0", "launcher-0", 1, 10.0)
    assert policy.restart(first) == 1
    assert policy.restart(ProcessEnded("node0", "launcher-0", 1, 20.0)) == 2
    last = ProcessEnded("node0", "launcher-0", 1, 30.0)
    assert policy.restart(last) == 0  # none left: an end like any other
    policy.feed(last)
    assert policy.state == "failed" and policy.restart_count == 2


def test_a_success_a_stop_or_no_restarts_is_never_a_restart() -> None:
    policy = JobPolicy(list(MPI), "mpi", max_restarts=1)
    assert policy.restart(ProcessEnded("node0", "launcher-0", 0, 1.0)) == 0
    assert policy.restart(ProcessEnded("node0", "launcher-0", 143, 1.0, stop_requested=True)) == 0
    policy.feed(StopAsked("node0", 2.0))
    assert policy.restart(ProcessEnded("node0", "launcher-0", 1, 3.0)) == 0
    assert JobPolicy(list(MPI), "mpi").restart(ProcessEnded("node0", "launcher-0", 1, 1.0)) == 0


def test_ps_restarts_workers_only_and_counts_each() -> None:
    policy = JobPolicy(list(PS), "ps", max_restarts=1)
    assert policy.restart(ProcessEnded("node0", "ps-0", 1, 1.0)) == 0
    assert policy.restart(ProcessEnded("node1", "worker-1", 3, 1.0)) == 1
    assert policy.restart(ProcessEnded("node0", "worker-0", 3, 2.0)) == 1
    assert policy.restart_count == 2 and policy.verdict is None


def test_ddp_is_restarted_by_torchrun_not_the_supervisor_and_counts_rounds() -> None:
    policy = JobPolicy(list(DDP), "ddp", max_restarts=2)
    assert policy.restart(ProcessEnded("node1", "torchrun-1", 1, 1.0)) == 0
    # Each agent restarts its workers in the same round: the job restarted once.
    assert policy.note_restart("node1", "torchrun-1", 1) is True
    assert policy.note_restart("node1", "torchrun-1", 1) is False
    policy.note_restart("node0", "torchrun-0", 1)
    assert policy.restart_count == 1
    # torchrun giving up is its own exit: fail-fast as before.
    assert policy.feed(ProcessEnded("node1", "torchrun-1", 1, 5.0)) is True
    assert policy.state == "failed"


def test_torchrun_attempts_and_failure_lines_are_read(tmp_path: Path) -> None:
    assert sv_torchrun_attempt(str(tmp_path), "torchrun-0") == 0
    for attempt in (0, 1, 2):
        (tmp_path / "torchrun/torchrun-0/job_abc" / f"attempt_{attempt}").mkdir(parents=True)
    (tmp_path / "torchrun/torchrun-1/job_xyz/attempt_3").mkdir(parents=True)  # a shared home
    assert sv_torchrun_attempt(str(tmp_path), "torchrun-0") == 2
    lines = [
        "E1126 12:51:30.992000 31315 torch/distributed/elastic/multiprocessing/api.py:1002] "
        "failed (exitcode: 3) local_rank: 1 (pid: 31883) of binary: /usr/bin/python3",
        "W1126 12:51:31 ... Sending process 31882 closing signal SIGTERM",
    ]
    assert sv_torchrun_failure(lines) == {"exit_code": 3, "local_rank": 1}
    assert sv_torchrun_failure(["nothing here"]) == {}
    # A worker killed by a signal (gloo's abort): torchrun's negative status, named.
    aborted = ["failed (exitcode: -6) local_rank: 0 (pid: 7) of binary: /usr/bin/python3"]
    assert sv_torchrun_failure(aborted) == {"exit_code": -6, "local_rank": 0, "signal": "SIGABRT"}


def test_a_wrapper_is_run_again_with_the_restart_count(tmp_path: Path) -> None:
    (tmp_path / "launcher-0.exit").write_text("3\n")
    (tmp_path / "launcher-0.sh").write_text(
        f'echo "$DISTCONSOLE_RESTART_COUNT" > {tmp_path}/count; echo 0 > {tmp_path}/launcher-0.exit'
    )
    child = sv_start_wrapper(str(tmp_path), "launcher-0", 2)
    assert child.wait(10) == 0
    assert (tmp_path / "count").read_text() == "2\n"
    assert (tmp_path / "launcher-0.pgid").read_text() == f"{child.pid}\n"
    assert (tmp_path / "launcher-0.exit").read_text() == "0\n"


def test_a_restarts_reason_names_rank_process_and_status() -> None:
    cause = {"rank": 1, "process": "torchrun-0", "exit_code": 3}
    assert sv_restart_reason(1, cause) == "restart 1: rank 1 (torchrun-0) exit status 3"
    assert sv_restart_reason(2, {"process": "worker-1", "signal": "SIGKILL"}) == (
        "restart 2: worker-1 SIGKILL"
    )


def test_torchruns_restart_count_reaches_distconsoles_name(tmp_path: Path) -> None:
    """The job's sitecustomize (on PYTHONPATH of every process when hang detection is
    on) maps TORCHELASTIC_RESTART_COUNT for torchrun's workers."""
    hook = Path(hang_sitecustomize.__file__)
    (tmp_path / "sitecustomize.py").write_text(hook.read_text())
    show = "import os; print(os.environ.get('DISTCONSOLE_RESTART_COUNT'))"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}
    worker = subprocess.run(
        [sys.executable, "-c", show],
        env={**env, "TORCHELASTIC_RESTART_COUNT": "2", "DISTCONSOLE_RESTART_COUNT": "0"},
        capture_output=True,
        text=True,
    )
    assert worker.stdout.strip() == "2", worker.stderr
    other = subprocess.run(
        [sys.executable, "-c", show],
        env={**env, "DISTCONSOLE_RESTART_COUNT": "1"},
        capture_output=True,
        text=True,
    )
    assert other.stdout.strip() == "1", other.stderr


def test_the_supervisor_source_holds_the_restart_part_and_compiles() -> None:
    source = supervisor_source()
    assert "class SvRestarts" in source
    result = subprocess.run(
        [sys.executable, "-c", "import sys; compile(sys.stdin.read(), 'sv', 'exec')"],
        input=source,
        text=True,
        capture_output=True,
    )
    assert result.returncode == 0, result.stderr


INVENTORY = """\
defaults: {user: me, gpus: 2}
hosts:
  - {name: a, address: 10.0.0.1}
  - {name: b, address: 10.0.0.2}
"""


@pytest.fixture
def inventory(tmp_path: Path) -> Inventory:
    path = tmp_path / "hosts.yaml"
    path.write_text(INVENTORY)
    return load(path)


def test_ddp_without_restarts_keeps_its_static_rendezvous(inventory: Inventory) -> None:
    planned = plan(
        make_spec(kind="ddp", program="t.py", master_port=29400), inventory, job_id="j-1"
    )
    argv = planned.launches[1].argv
    assert "--node-rank" in argv and "--rdzv-backend" not in argv
    assert planned.max_restarts == 0
    env = planned.launches[1].env
    assert env["DISTCONSOLE_CHECKPOINT_DIR"].endswith("/j-1/checkpoints")


def test_ddp_with_restarts_uses_torchruns_c10d_rendezvous(inventory: Inventory) -> None:
    spec = make_spec(kind="ddp", program="t.py", master_port=29400, max_restarts=3)
    planned = plan(spec, inventory, job_id="j-1")
    assert planned.max_restarts == 3
    for node, launch in enumerate(planned.launches):
        argv = list(launch.argv)
        assert "--node-rank" not in argv and "--master-addr" not in argv
        pairs = dict(itertools.pairwise(argv))
        assert pairs["--rdzv-backend"] == "c10d"
        assert pairs["--rdzv-endpoint"] == "10.0.0.1:29400"
        assert pairs["--rdzv-id"] == "j-1"
        assert pairs["--rdzv-conf"] == f"is_host={1 if node == 0 else 0}"
        assert pairs["--local-addr"] == f"10.0.0.{node + 1}"
        assert pairs["--max-restarts"] == "3"
        assert pairs["--log-dir"].endswith(f"/j-1/torchrun/torchrun-{node}")


def test_the_checkpoint_dir_and_the_inventory_default(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text(INVENTORY.replace("gpus: 2}", "gpus: 2, max_restarts: 4}"))
    spec = make_spec(kind="ps", program="t.py", checkpoint_dir="/shared/ck/")
    planned = plan(spec, load(path), job_id="j-2")
    assert planned.max_restarts == 4
    assert {launch.env["DISTCONSOLE_CHECKPOINT_DIR"] for launch in planned.launches} == {
        "/shared/ck"
    }


def test_mpirun_forwards_the_restart_count_only_with_restarts(inventory: Inventory) -> None:
    without = plan(make_spec(kind="mpi", program="/bin/true"), inventory, job_id="j-3")
    assert "DISTCONSOLE_RESTART_COUNT" not in without.launches[0].argv
    spec = make_spec(kind="mpi", program="/bin/true", max_restarts=1)
    argv = list(plan(spec, inventory, job_id="j-3").launches[0].argv)
    assert argv[argv.index("DISTCONSOLE_RESTART_COUNT") - 1] == "-x"


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"max_restarts": -1}, "max_restarts", "0..100"),
        ({"max_restarts": 101}, "max_restarts", "0..100"),
        ({"checkpoint_dir": "relative/dir"}, "checkpoint_dir", "absolute path"),
        ({"kind": "ray", "max_restarts": 1}, "max_restarts", "ray"),
    ],
)
def test_bad_restart_options_name_their_field(
    fields: dict[str, object], field: str, words: str
) -> None:
    values: dict[str, object] = {"kind": "ddp", "program": "t.py", **fields}
    with pytest.raises(JobSpecError) as caught:
        make_spec(**values)
    assert caught.value.field == field and words in str(caught.value)


def test_a_slurm_script_restarts_through_torchrun_and_requeues(inventory: Inventory) -> None:
    spec = make_spec(kind="ddp", program="t.py", gpus_per_host=2, max_restarts=2)
    script = sbatch_export(job_shape(spec, inventory)).script
    lines = script.splitlines()
    assert "#SBATCH --requeue" in lines and "  --max-restarts 2 \\" in lines
    assert "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in lines
    assert 'export DISTCONSOLE_RESTART_COUNT="${SLURM_RESTART_COUNT:-0}"' in lines
    assert (
        'export DISTCONSOLE_CHECKPOINT_DIR="$SLURM_SUBMIT_DIR/checkpoints/$SLURM_JOB_ID"' in lines
    )
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    plain = sbatch_export(job_shape(make_spec(kind="ddp", program="t.py"), inventory)).script
    assert "--requeue" not in plain and "DISTCONSOLE_CHECKPOINT_DIR" not in plain
    mpi = job_shape(make_spec(kind="mpi", program="/bin/true", max_restarts=1), inventory)
    assert any("a failed rank is not run again" in w for w in mpi.warnings)


def test_a_wrapper_that_cannot_run_again_leaves_the_end_standing(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        sv_start_wrapper(str(tmp_path / "gone"), "launcher-0", 1)
