"""MPI and Horovod planners: one launcher on the first host, exact argv and env."""

from __future__ import annotations

import shlex

import pytest

from console.errors import JobSpecError
from console.inventory import Host, Inventory
from console.jobs.models import JobKind, LogFile, Upload
from console.jobs.planner import plan
from console.jobs.spec import make_spec

JOB = "job-2"
JD = "~/distconsole/.distconsole/jobs/job-2"


def inventory(**extra: object) -> Inventory:
    common: dict[str, object] = {"gpus": 2, "port": 2022, "identity_file": "/keys/id_ed25519"}
    common.update(extra)
    return Inventory(
        path="hosts.yaml",
        hosts=(
            Host(name="n0", address="10.0.0.1", env={"HOSTVAR": "h0"}, **common),  # type: ignore[arg-type]
            Host(name="n1", address="10.0.0.2", **common),  # type: ignore[arg-type]
            Host(name="n2", address="10.0.0.3", **common),  # type: ignore[arg-type]
        ),
    )


def test_mpirun_exact_argv_env_and_rank_logs() -> None:
    spec = make_spec(
        kind="mpi",
        program="train.py",
        args=["--epochs", "2"],
        hosts=["n0", "n1"],
        interface="eth1",
        env={"FOO": "bar", "OMP_NUM_THREADS": "4"},
    )
    p = plan(spec, inventory(), job_id=JOB)
    assert p.kind is JobKind.MPI
    assert p.world_size == 4
    assert len(p.launches) == 1
    launch = p.launches[0]
    assert (launch.host, launch.role, launch.index, launch.ranks) == (
        "n0",
        "launcher",
        0,
        (0, 1, 2, 3),
    )
    assert launch.argv == (
        "mpirun", "-np", "4", "-H", "10.0.0.1:2,10.0.0.2:2",
        "--bind-to", "none", "--output-filename", f"{JD}/ranks",
        "--mca", "btl_tcp_if_include", "eth1", "--mca", "oob_tcp_if_include", "eth1",
        "--mca", "plm_rsh_args", "-p 2022",
        "-x", "PATH", "-x", "LD_LIBRARY_PATH", "-x", "PYTHONUNBUFFERED",
        "-x", "OMP_NUM_THREADS", "-x", "OPENBLAS_NUM_THREADS", "-x", "MKL_NUM_THREADS",
        "-x", "NCCL_SOCKET_IFNAME", "-x", "HOSTVAR", "-x", "FOO",
        "-x", "DISTCONSOLE_JOB_ID", "-x", "DISTCONSOLE_JOB_DIR", "-x", "DISTCONSOLE_WORLD_SIZE",
        "python3", "train.py", "--epochs", "2",
    )  # fmt: skip
    assert launch.env == {
        "PYTHONUNBUFFERED": "1",  # live logs: launchers and trainers write to files
        "OMP_NUM_THREADS": "4",  # the user's value wins over the cap
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NCCL_SOCKET_IFNAME": "eth1",
        "HOSTVAR": "h0",
        "FOO": "bar",
        "DISTCONSOLE_JOB_ID": JOB,
        "DISTCONSOLE_JOB_DIR": JD,
        "DISTCONSOLE_WORLD_SIZE": "4",
    }
    assert launch.cwd == "~/distconsole"
    # Open MPI 4.1: <dir>/1/rank.<r>/stdout, r padded to the digits of np.
    assert launch.log_paths[:2] == (
        LogFile(f"{JD}/launcher-0.out", "stdout", "launcher"),
        LogFile(f"{JD}/launcher-0.err", "stderr", "launcher"),
    )
    assert launch.log_paths[2:] == tuple(
        LogFile(f"{JD}/ranks/1/rank.{r}/{stream}", stream, "rank", r, r % 2)
        for r in range(4)
        for stream in ("stdout", "stderr")
    )
    assert p.hosts_involved == ("n0", "n1")
    assert p.master_port is None


def test_every_variable_is_forwarded_with_x() -> None:
    spec = make_spec(kind="mpi", program="a.out", env={"PATH": "/opt/bin", "Z": "1"}, total_steps=7)
    launch = plan(spec, inventory(), job_id=JOB).launches[0]
    forwarded = [launch.argv[i + 1] for i, a in enumerate(launch.argv) if a == "-x"]
    assert len(forwarded) == len(set(forwarded))
    assert set(forwarded) == set(launch.env) | {"PATH", "LD_LIBRARY_PATH"}
    assert launch.argv[-1] == "a.out"  # not a .py: executed directly


def test_no_port_no_key_no_interface_means_no_mca_options() -> None:
    inv = Inventory(
        path="h", hosts=(Host(name="a", address="a", gpus=1), Host(name="b", address="b", gpus=1))
    )
    launch = plan(make_spec(kind="mpi", program="a.out"), inv, job_id=JOB).launches[0]
    assert "--mca" not in launch.argv
    assert launch.argv[:5] == ("mpirun", "-np", "2", "-H", "a:1,b:1")


def test_differing_ssh_ports_warn_instead_of_guessing() -> None:
    inv = Inventory(
        path="h",
        hosts=(
            Host(name="a", address="127.0.0.10", port=4000),
            Host(name="b", address="127.0.0.11", port=4001),
            Host(name="c", address="127.0.0.12", port=4002),
        ),
    )
    for kind in ("mpi", "horovod"):
        p = plan(make_spec(kind=kind, program="a.out"), inv, job_id=JOB)
        assert "plm_rsh_args" not in p.launches[0].argv
        assert "-p" not in p.launches[0].argv
        (warning,) = [w for w in p.warnings if "different ssh ports" in w]
        assert "'port'" in warning and "a (4000), b (4001), c (4002)" in warning
    # mpirun also ssh's to the launcher's own address (it does not take 127.0.0.10 for
    # itself), so the launcher's port counts too: two hosts, two ports, still no -p.
    two = Inventory(path="h", hosts=inv.hosts[:2])
    p = plan(make_spec(kind="mpi", program="a.out"), two, job_id=JOB)
    assert "plm_rsh_args" not in p.launches[0].argv
    assert any("different ssh ports" in w for w in p.warnings)


def test_one_port_on_every_host_is_passed_to_every_ssh() -> None:
    hosts = tuple(Host(name=n, address=f"127.0.0.{i}", port=4000) for i, n in enumerate("abc"))
    inv = Inventory(path="h", hosts=hosts)
    p = plan(make_spec(kind="mpi", program="a.out"), inv, job_id=JOB)
    argv = p.launches[0].argv
    assert argv[argv.index("plm_rsh_args") + 1] == "-p 4000"
    assert not any("ssh port" in w for w in p.warnings)
    horovod = plan(make_spec(kind="horovod", program="t.py"), inv, job_id=JOB).launches[0].argv
    assert horovod[horovod.index("-p") + 1] == "4000"
    # Port 22 everywhere (stated or not) needs no option.
    default = Inventory(
        path="h", hosts=(Host(name="a", address="a", port=22), Host(name="b", address="b"))
    )
    argv = plan(make_spec(kind="mpi", program="a.out"), default, job_id=JOB).launches[0].argv
    assert "plm_rsh_args" not in argv


def test_console_identity_file_is_never_handed_to_the_launcher() -> None:
    for kind in ("mpi", "horovod"):
        p = plan(make_spec(kind=kind, program="t.py"), inventory(), job_id=JOB)
        argv = p.launches[0].argv
        assert not any("/keys/id_ed25519" in a for a in argv), argv
        assert "-i" not in " ".join(argv).split() and "--ssh-identity-file" not in argv
        (warning,) = [w for w in p.warnings if "identity_file" in w]
        assert "/keys/id_ed25519" in warning and "n0" in warning
    # A key path with a space used to be refused; with no key passed it plans fine.
    spaced = plan(
        make_spec(kind="mpi", program="a.out"),
        inventory(identity_file="/my keys/id"),
        job_id=JOB,
    )
    assert any("/my keys/id" in w for w in spaced.warnings)


def test_different_users_and_work_dirs_are_warned() -> None:
    inv = Inventory(
        path="h",
        hosts=(
            Host(name="a", address="10.0.0.1", user="alice", gpus=1),
            Host(name="b", address="10.0.0.2", user="bob", gpus=1, work_dir="/scratch/b"),
        ),
    )
    p = plan(make_spec(kind="mpi", program="a.out"), inv, job_id=JOB)
    (users,) = [w for w in p.warnings if "different users" in w]
    assert "'user'" in users and "a (alice), b (bob)" in users
    (dirs,) = [w for w in p.warnings if "different work_dirs" in w]
    assert "b (/scratch/b)" in dirs and "~/distconsole" in dirs
    # One account, one work_dir, one port, no console key: nothing to warn about.
    same = Inventory(
        path="h",
        hosts=(
            Host(name="a", address="10.0.0.1", user="alice", port=2022, gpus=1),
            Host(name="b", address="10.0.0.2", user="alice", port=2022, gpus=1),
        ),
    )
    assert plan(make_spec(kind="mpi", program="a.out"), same, job_id=JOB).warnings == ()


def test_rank_log_padding_follows_open_mpi() -> None:
    p = plan(make_spec(kind="mpi", program="a.out", gpus_per_host=5), inventory(), job_id=JOB)
    assert p.world_size == 15
    paths = [log.path for log in p.launches[0].log_paths if log.rank is not None]
    assert paths[0] == f"{JD}/ranks/1/rank.00/stdout"
    assert paths[-1] == f"{JD}/ranks/1/rank.14/stderr"
    local = [(log.rank, log.local_rank) for log in p.launches[0].log_paths[2::2]]
    assert local[4:7] == [(4, 4), (5, 0), (6, 1)]


def test_horovodrun_gloo_exact_argv_and_step_split() -> None:
    spec = make_spec(
        kind="horovod",
        program="example:horovod",
        args=["--steps", "{steps_per_rank}"],
        total_steps=100,
        gpus_per_host=2,
        interface="eth0",
    )
    p = plan(spec, inventory(), job_id=JOB)
    # 100 steps over 6 ranks: 16 each, 4 dropped (Horovod's total // size).
    assert (p.world_size, p.total_steps, p.steps_per_rank, p.steps_dropped) == (6, 100, 16, 4)
    launch = p.launches[0]
    assert launch.argv == (
        "horovodrun", "-np", "6", "-H", "10.0.0.1:2,10.0.0.2:2,10.0.0.3:2",
        "-p", "2022",
        "--network-interface", "eth0", "--gloo", "--output-filename", f"{JD}/ranks",
        "python3", f"{JD}/example_horovod.py", "--steps", "16",
    )  # fmt: skip
    assert launch.env["DISTCONSOLE_TOTAL_STEPS"] == "100"
    assert launch.env["DISTCONSOLE_STEPS_PER_RANK"] == "16"
    assert launch.env["DISTCONSOLE_WORLD_SIZE"] == "6"
    # horovodrun --gloo: <dir>/rank.<r>/, r padded to the digits of np - 1.
    assert launch.log_paths[2] == LogFile(f"{JD}/ranks/rank.0/stdout", "stdout", "rank", 0, 0)
    # Ranks on every host run the launcher's path, so the example is copied there.
    assert p.uploads == tuple(
        Upload(h, f"{JD}/example_horovod.py", "horovod_train.py") for h in ("n0", "n1", "n2")
    )


def test_horovod_step_split_exact_division() -> None:
    spec = make_spec(kind="horovod", program="t.py", total_steps=12, gpus_per_host=2)
    p = plan(spec, inventory(), job_id=JOB)
    assert (p.steps_per_rank, p.steps_dropped) == (2, 0)


def test_horovod_step_split_refuses_fewer_steps_than_ranks() -> None:
    spec = make_spec(kind="horovod", program="t.py", total_steps=5, gpus_per_host=2)
    with pytest.raises(JobSpecError) as info:
        plan(spec, inventory(), job_id=JOB)
    assert info.value.field == "total_steps"
    assert "6 ranks" in info.value.detail


def test_horovodrun_mpi_flavour_and_single_rank() -> None:
    spec = make_spec(kind="horovod", program="t.py", horovod_launcher="mpi", gpus_per_host=1)
    launch = plan(spec, inventory(), job_id=JOB).launches[0]
    assert "--mpi" in launch.argv and "--gloo" not in launch.argv
    assert launch.log_paths[2].path == f"{JD}/ranks/1/rank.0/stdout"
    one = Inventory(path="h", hosts=(Host(name="solo", address="10.9.9.9", gpus=1),))
    single = plan(make_spec(kind="horovod", program="t.py"), one, job_id=JOB).launches[0]
    # horovodrun --gloo cannot name per-rank files for np=1 (log10(0)), so none is asked.
    assert "--output-filename" not in single.argv
    assert len(single.log_paths) == 2


def test_hostile_argument_stays_one_argv_item() -> None:
    hostile = "'; touch /tmp/x #"
    for kind in ("mpi", "horovod"):
        launch = plan(
            make_spec(kind=kind, program="t.py", args=[hostile]), inventory(), job_id=JOB
        ).launches[0]
        assert launch.argv[-1] == hostile
        assert shlex.split(shlex.join(launch.argv)) == list(launch.argv)


def test_differing_host_env_is_warned() -> None:
    p = plan(make_spec(kind="mpi", program="a.out"), inventory(), job_id=JOB)
    assert any("every rank gets the launcher's" in w for w in p.warnings)


@pytest.mark.parametrize("kind", ["mpi", "horovod"])
def test_two_hosts_on_one_address_are_refused_naming_hosts(kind: str) -> None:
    inventory = Inventory(
        path="hosts.yaml",
        hosts=(
            Host(name="c0", address="10.0.0.5", port=2022, gpus=1),
            Host(name="c1", address="10.0.0.5", port=2023, gpus=1),
        ),
    )
    spec = make_spec(kind=kind, program="train.py", total_steps=4)
    with pytest.raises(JobSpecError) as err:
        plan(spec, inventory, job_id=JOB)
    assert err.value.field == "hosts"
    assert "c0 and c1 share the address 10.0.0.5" in str(err.value)
