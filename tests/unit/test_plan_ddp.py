"""DDP planner: exact torchrun argv, environment and log files per host."""

from __future__ import annotations

import shlex

from console.inventory import Host, Inventory
from console.jobs.models import JobKind, LogFile, Upload
from console.jobs.paths import shell_join
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec

JOB = "job-1"
J0 = "~/distconsole/.distconsole/jobs/job-1"
J1 = "/data/w/.distconsole/jobs/job-1"


def inventory() -> Inventory:
    return Inventory(
        path="hosts.yaml",
        hosts=(
            Host(name="n0", address="10.0.0.1", gpus=2, env={"HOSTVAR": "h0", "A": "host"}),
            Host(name="n1", address="10.0.0.2", gpus=2, work_dir="/data/w", interface="ib0"),
            Host(name="n2", address="10.0.0.3", gpus=2, tags=("spare",)),
        ),
    )


def hang_env(job_dir: str) -> dict[str, str]:
    """What hang detection (on by default) adds: the hook folder for PYTHONPATH and
    PyTorch's flight recorder dumping into hang/."""
    return {
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": f"{job_dir}/hang/nccl_trace_rank_",
        "DISTCONSOLE_HANG_HOOK": f"{job_dir}/python",
    }


def test_two_hosts_exact_argv_env_and_logs() -> None:
    spec = make_spec(
        kind="ddp",
        program="train.py",
        args=["--lr", "0.1"],
        hosts=["n0", "n1"],
        master_port=29555,
        env={"A": "user", "NCCL_DEBUG": "INFO"},
    )
    p = plan(spec, inventory(), job_id=JOB)
    assert p.kind is JobKind.DDP
    assert p.world_size == 4
    assert (p.master_addr, p.master_port) == ("10.0.0.1", 29555)
    assert p.hosts_involved == ("n0", "n1")
    assert p.job_dirs == {"n0": J0, "n1": J1}
    assert [launch.host for launch in p.launches] == ["n0", "n1"]
    first, second = p.launches
    common = ["--master-addr", "10.0.0.1", "--master-port", "29555"]
    assert first.argv == (
        *("torchrun", "--nnodes", "2", "--nproc-per-node", "2", "--node-rank", "0", *common),
        *("--log-dir", f"{J0}/torchrun", "--tee", "3", "train.py", "--lr", "0.1"),
    )
    assert second.argv == (
        *("torchrun", "--nnodes", "2", "--nproc-per-node", "2", "--node-rank", "1", *common),
        *("--log-dir", f"{J1}/torchrun", "--tee", "3", "train.py", "--lr", "0.1"),
    )
    assert first.env == {
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "HOSTVAR": "h0",
        "A": "user",  # the user's value wins over the host's
        "NCCL_DEBUG": "INFO",
        "DISTCONSOLE_JOB_ID": JOB,
        "DISTCONSOLE_JOB_DIR": J0,
        "DISTCONSOLE_CHECKPOINT_DIR": f"{J0}/checkpoints",
        "DISTCONSOLE_WORLD_SIZE": "4",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29555",
        "WORLD_SIZE": "4",
        "NODE_RANK": "0",
        **hang_env(J0),
    }
    # n1 has an interface in the inventory: NCCL and Gloo are pinned to it there.
    assert second.env == {
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "NCCL_SOCKET_IFNAME": "ib0",
        "GLOO_SOCKET_IFNAME": "ib0",
        "A": "user",
        "NCCL_DEBUG": "INFO",
        "DISTCONSOLE_JOB_ID": JOB,
        "DISTCONSOLE_JOB_DIR": J1,
        "DISTCONSOLE_CHECKPOINT_DIR": f"{J1}/checkpoints",
        "DISTCONSOLE_WORLD_SIZE": "4",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29555",
        "WORLD_SIZE": "4",
        "NODE_RANK": "1",
        **hang_env(J1),
    }
    assert first.cwd == "~/distconsole" and second.cwd == "/data/w"
    assert (first.role, first.index, first.ranks) == ("torchrun", 0, (0, 1))
    assert (second.role, second.index, second.ranks) == ("torchrun", 1, (2, 3))
    assert second.log_paths == (
        LogFile(f"{J1}/torchrun-1.out", "stdout", "launcher"),
        LogFile(f"{J1}/torchrun-1.err", "stderr", "launcher"),
    )
    assert [u.resource for u in p.uploads] == ["hang_sitecustomize.py"] * 2  # no example
    assert p.fail_fast is True and p.warnings == ()
    assert (p.hang_timeout, p.stop_on_hang) == (300.0, False)


def test_hang_check_off_adds_nothing() -> None:
    spec = make_spec(kind="ddp", program="t.py", hosts=["n0"], hang_timeout="off")
    p = plan(spec, inventory(), job_id=JOB)
    assert p.hang_timeout is None and p.uploads == ()
    assert not set(hang_env(J0)) & set(p.launches[0].env)


def test_user_flight_recorder_settings_win() -> None:
    spec = make_spec(
        kind="ddp",
        program="t.py",
        hosts=["n0"],
        hang_timeout="20",
        stop_on_hang=True,
        env={"TORCH_NCCL_TRACE_BUFFER_SIZE": "50", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0"},
    )
    p = plan(spec, inventory(), job_id=JOB)
    env = p.launches[0].env
    assert (env["TORCH_NCCL_TRACE_BUFFER_SIZE"], env["TORCH_NCCL_DUMP_ON_TIMEOUT"]) == ("50", "0")
    assert "TORCH_FR_BUFFER_SIZE" not in env  # torch reads it first: the user's would lose
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == f"{J0}/hang/nccl_trace_rank_"
    assert (p.hang_timeout, p.stop_on_hang) == (20.0, True)


def test_user_omp_threads_and_interface_override() -> None:
    spec = make_spec(
        kind="ddp",
        program="t.py",
        hosts=["n0", "n1"],
        interface="eth1",
        env={"OMP_NUM_THREADS": "8"},
        gpus_per_host=1,
        workdir="/scratch",
    )
    p = plan(spec, inventory(), job_id=JOB)
    for launch in p.launches:
        assert launch.env["OMP_NUM_THREADS"] == "8"
        assert launch.env["NCCL_SOCKET_IFNAME"] == "eth1"
        assert launch.env["GLOO_SOCKET_IFNAME"] == "eth1"
        assert launch.argv[launch.argv.index("--nproc-per-node") + 1] == "1"
        assert launch.cwd == "/scratch"
    assert p.world_size == 2


def test_three_hosts_ranks_and_tag_selection() -> None:
    p = plan(make_spec(kind="ddp", program="t.py", gpus_per_host=3), inventory(), job_id=JOB)
    assert [launch.ranks for launch in p.launches] == [(0, 1, 2), (3, 4, 5), (6, 7, 8)]
    assert [launch.env["NODE_RANK"] for launch in p.launches] == ["0", "1", "2"]
    assert all(launch.env["WORLD_SIZE"] == "9" for launch in p.launches)
    assert all(launch.argv[2] == "3" for launch in p.launches)  # --nnodes 3
    tagged = plan(make_spec(kind="ddp", program="t.py", tags=["spare"]), inventory(), job_id=JOB)
    assert tagged.hosts_involved == ("n2",)


def test_host_order_given_by_name_sets_the_master() -> None:
    spec = make_spec(kind="ddp", program="t.py", hosts=["n1", "n0"], master_port=29000)
    p = plan(spec, inventory(), job_id=JOB)
    assert p.master_addr == "10.0.0.2"
    assert [launch.host for launch in p.launches] == ["n1", "n0"]


def test_example_program_is_uploaded_to_every_host() -> None:
    spec = make_spec(kind="ddp", program="example:ddp", hosts=["n0", "n1"], args=["--steps", "3"])
    p = plan(spec, inventory(), job_id=JOB)
    assert p.launches[0].argv[-3:] == (f"{J0}/example_ddp.py", "--steps", "3")
    assert p.launches[1].argv[-3:] == (f"{J1}/example_ddp.py", "--steps", "3")
    assert p.uploads == (
        Upload("n0", f"{J0}/example_ddp.py", "ddp_train.py"),
        Upload("n1", f"{J1}/example_ddp.py", "ddp_train.py"),
        Upload(
            "n0",
            f"{J0}/python/sitecustomize.py",
            "hang_sitecustomize.py",
            "console.hostprogs.supervisor",
        ),
        Upload(
            "n1",
            f"{J1}/python/sitecustomize.py",
            "hang_sitecustomize.py",
            "console.hostprogs.supervisor",
        ),
    )


def test_non_python_program_uses_no_python() -> None:
    p = plan(make_spec(kind="ddp", program="/bin/my-trainer"), inventory(), job_id=JOB)
    assert p.launches[0].argv[-2:] == ("--no-python", "/bin/my-trainer")


def test_custom_python_runs_its_own_torchrun() -> None:
    inv = Inventory(path="h", hosts=(Host(name="x", address="x", python="/opt/py/bin/python3"),))
    launch = plan(make_spec(kind="ddp", program="t.py"), inv, job_id=JOB).launches[0]
    assert launch.argv[:3] == ("/opt/py/bin/python3", "-m", "torch.distributed.run")


def test_local_master_is_loopback_and_warns_about_remote_hosts() -> None:
    inv = Inventory(
        path="h",
        hosts=(Host(name="me", address="local"), Host(name="far", address="10.1.1.1")),
    )
    p = plan(make_spec(kind="ddp", program="t.py"), inv, job_id=JOB)
    assert p.master_addr == "127.0.0.1"
    assert any("far" in w and "cannot reach" in w for w in p.warnings)


def test_step_split_placeholders_and_env() -> None:
    spec = make_spec(
        kind="ddp",
        program="t.py",
        hosts=["n0", "n1"],
        total_steps=10,
        args=["--steps={steps_per_rank}", "{total_steps}/{world_size}", "{other}"],
    )
    p = plan(spec, inventory(), job_id=JOB)
    assert (p.total_steps, p.steps_per_rank, p.steps_dropped) == (10, 2, 2)
    assert p.launches[0].argv[-3:] == ("--steps=2", "10/4", "{other}")
    assert p.launches[0].env["DISTCONSOLE_TOTAL_STEPS"] == "10"
    assert p.launches[0].env["DISTCONSOLE_STEPS_PER_RANK"] == "2"


def test_default_master_port_is_deterministic_per_job() -> None:
    spec = make_spec(kind="ddp", program="t.py")
    a = plan(spec, inventory(), job_id="job-a").master_port
    assert a == plan(spec, inventory(), job_id="job-a").master_port
    assert a is not None and 29500 <= a < 30500


def test_generated_job_id_is_path_safe_and_unique() -> None:
    spec = make_spec(kind="ddp", program="t.py", name="exp1")
    a, b = plan(spec, inventory()), plan(spec, inventory())
    assert a.job_id != b.job_id
    assert a.job_id.startswith("exp1-")
    assert a.job_dirs["n0"] == f"~/distconsole/.distconsole/jobs/{a.job_id}"


def test_hostile_argument_stays_one_argv_item() -> None:
    hostile = "'; touch /tmp/x #"
    p = plan(make_spec(kind="ddp", program="t.py", args=[hostile]), inventory(), job_id=JOB)
    argv = p.launches[0].argv
    assert argv[-1] == hostile
    assert shlex.split(shell_join(argv))[-1] == hostile
    assert shlex.split(shlex.join(argv)) == list(argv)


def test_no_fail_fast_is_carried() -> None:
    p = plan(make_spec(kind="ddp", program="t.py", fail_fast=False), inventory(), job_id=JOB)
    assert p.fail_fast is False
