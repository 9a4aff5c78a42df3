"""MPI and Horovod planners: one launcher on the first host, exact argv and env."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from console.errors import JobSpecError
from console.inventory import Host, Inventory
from console.jobs.models import JobKind, LogFile, Upload
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec

JOB = "job-2"
JD = "~/distconsole/.distconsole/jobs/job-2"


def wrapped(argv: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
    """(the launcher's own options, the rank wrapper's script) of a planned argv."""
    assert argv[-4:-2] == ("bash", "-c") and argv[-1] == "distconsole-rank", argv[-4:]
    return argv[:-4], argv[-2]


def arm(script: str, pattern: str) -> str:
    """The wrapper's case arm for the ranks ``pattern`` (``0|1``)."""
    start = script.index(f"\n{pattern})\n") + len(pattern) + 3
    return script[start : script.index("\n;;", start)]


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
    options, script = wrapped(launch.argv)
    # (H2's hang hook variable, when on by default, is forwarded after these.)
    assert options[: options.index("DISTCONSOLE_WORLD_SIZE") + 1] == (
        "mpirun", "-np", "4", "-H", "10.0.0.1:2,10.0.0.2:2",
        "--bind-to", "none",
        "--mca", "btl_tcp_if_include", "eth1", "--mca", "oob_tcp_if_include", "eth1",
        "--mca", "plm_rsh_args", "-p 2022",
        "-x", "PATH", "-x", "PYTHONUNBUFFERED",
        "-x", "OMP_NUM_THREADS", "-x", "OPENBLAS_NUM_THREADS", "-x", "MKL_NUM_THREADS",
        "-x", "NCCL_SOCKET_IFNAME", "-x", "HOSTVAR", "-x", "FOO",
        "-x", "DISTCONSOLE_JOB_ID", "-x", "DISTCONSOLE_JOB_DIR", "-x", "DISTCONSOLE_WORLD_SIZE",
    )  # fmt: skip
    # Ranks 0-1 on n0, 2-3 on n1: each in its own host's directories, n1 without n0's
    # inventory variable.
    first, second = arm(script, "0|1"), arm(script, "2|3")
    assert f'd="$HOME"/{JD[2:]}/ranks/rank."$r"' in first
    assert "exec python3 train.py --epochs 2 </dev/null" in first
    assert "export HOSTVAR" not in first and "unset HOSTVAR" in second
    assert {k: v for k, v in launch.env.items() if k != "DISTCONSOLE_HANG_HOOK"} == {
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
        "DISTCONSOLE_CHECKPOINT_DIR": f"{JD}/checkpoints",
    }
    assert launch.cwd == "~/distconsole"
    # Each rank's files on the host it runs on.
    assert launch.log_paths[:2] == (
        LogFile(f"{JD}/launcher-0.out", "stdout", "launcher"),
        LogFile(f"{JD}/launcher-0.err", "stderr", "launcher"),
    )
    assert launch.log_paths[2:] == tuple(
        LogFile(f"{JD}/ranks/rank.{r}/{stream}", stream, "rank", r, r % 2, host=f"n{r // 2}")
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
    # Only what the launcher surely has: no -x for an ambient LD_LIBRARY_PATH (issue 23).
    assert set(forwarded) == set(launch.env) | {"PATH"}
    assert "exec a.out </dev/null" in wrapped(launch.argv)[1]  # not a .py: executed directly


def test_ld_library_path_is_forwarded_only_when_the_job_sets_it() -> None:
    """Without it in the job's env the launcher may lack it: no ``-x`` (mpirun warns for
    an unset name); each rank keeps its own host's. Set by the user, it is forwarded."""
    bare = plan(make_spec(kind="mpi", program="a.out"), inventory(), job_id=JOB).launches[0]
    assert "LD_LIBRARY_PATH" not in bare.argv
    spec = make_spec(kind="mpi", program="a.out", env={"LD_LIBRARY_PATH": "/opt/lib"})
    launch = plan(spec, inventory(), job_id=JOB).launches[0]
    forwarded = [launch.argv[i + 1] for i, a in enumerate(launch.argv) if a == "-x"]
    assert "LD_LIBRARY_PATH" in forwarded and launch.env["LD_LIBRARY_PATH"] == "/opt/lib"


def test_ranks_hand_the_launcher_none_of_their_output() -> None:
    """Each rank's output goes to its own files only (issue 23: mpirun echoed every line
    into its own log, and it showed twice); the stdout reader still marks it done."""
    launch = plan(make_spec(kind="mpi", program="a.out"), inventory(), job_id=JOB).launches[0]
    script = wrapped(launch.argv)[1]
    assert "tee" not in script
    assert (
        'rm -f "$d/done"; '
        'exec > >(trap \'\' TERM INT HUP; cat >>"$d/stdout"; : >"$d/done") 2>>"$d/stderr"' in script
    )


def test_no_port_no_key_no_interface_means_no_mca_options() -> None:
    inv = Inventory(
        path="h", hosts=(Host(name="a", address="a", gpus=1), Host(name="b", address="b", gpus=1))
    )
    launch = plan(make_spec(kind="mpi", program="a.out"), inv, job_id=JOB).launches[0]
    assert "--mca" not in launch.argv
    assert launch.argv[:5] == ("mpirun", "-np", "2", "-H", "a:1,b:1")
    assert "--output-filename" not in launch.argv


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
        (warning,) = [w for w in p.warnings if "differ in user or ssh port" in w]
        assert "a (ssh default user, port 4000), b (ssh default user, port 4001)" in warning
        assert "distconsole keys HOSTS --host a,b,c" in warning
        # Ports differ: hosts by inventory name, which ~/.ssh/config maps to each port.
        assert "a:1,b:1,c:1" in p.launches[0].argv
    # mpirun also ssh's to the launcher's own address (it does not take 127.0.0.10 for
    # itself), so the launcher's port counts too: two hosts, two ports, still no -p.
    two = Inventory(path="h", hosts=inv.hosts[:2])
    p = plan(make_spec(kind="mpi", program="a.out"), two, job_id=JOB)
    assert "plm_rsh_args" not in p.launches[0].argv
    assert any("differ in user or ssh port" in w for w in p.warnings)


def test_one_port_on_every_host_is_passed_to_every_ssh() -> None:
    hosts = tuple(Host(name=n, address=f"127.0.0.{i}", port=4000) for i, n in enumerate("abc"))
    inv = Inventory(path="h", hosts=hosts)
    p = plan(make_spec(kind="mpi", program="a.out"), inv, job_id=JOB)
    argv = p.launches[0].argv
    assert argv[argv.index("plm_rsh_args") + 1] == "-p 4000"
    assert not any("ssh port" in w for w in p.warnings)
    assert argv[argv.index("-H") + 1] == "127.0.0.0:1,127.0.0.1:1,127.0.0.2:1"
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


def test_different_users_go_by_inventory_name_and_work_dirs_are_per_host() -> None:
    inv = Inventory(
        path="h",
        hosts=(
            Host(name="a", address="10.0.0.1", user="alice", gpus=1),
            Host(name="b", address="10.0.0.2", user="bob", gpus=1, work_dir="~/scratch"),
        ),
    )
    p = plan(make_spec(kind="mpi", program="t.py"), inv, job_id=JOB)
    (users,) = [w for w in p.warnings if "differ in user" in w]
    assert "a (alice, port 22), b (bob, port 22)" in users and "its ~/.ssh/config" in users
    options, script = wrapped(p.launches[0].argv)
    assert options[options.index("-H") + 1] == "a:1,b:1"
    # Each rank enters its own host's working directory, with ~/ expanded there.
    assert 'cd -- "$HOME"/distconsole ||' in arm(script, "0")
    assert 'cd -- "$HOME"/scratch ||' in arm(script, "1")
    assert 'rank."$r"' in arm(script, "1") and "scratch/.distconsole/jobs/job-2/ranks/" in script
    rank1 = [f for f in p.launches[0].log_paths if f.rank == 1]
    assert {f.host for f in rank1} == {"b"}
    assert rank1[0].path == "~/scratch/.distconsole/jobs/job-2/ranks/rank.1/stdout"
    # One account, one work_dir, one port, no console key: nothing to warn about.
    same = Inventory(
        path="h",
        hosts=(
            Host(name="a", address="10.0.0.1", user="alice", port=2022, gpus=1),
            Host(name="b", address="10.0.0.2", user="alice", port=2022, gpus=1),
        ),
    )
    assert plan(make_spec(kind="mpi", program="a.out"), same, job_id=JOB).warnings == ()


def test_each_host_runs_its_own_setup_and_the_rank_script_runs_in_bash() -> None:
    inv = Inventory(
        path="h",
        hosts=(
            Host(name="a", address="10.0.0.1", gpus=1, setup="source ~/venv-a/bin/activate"),
            Host(name="b", address="10.0.0.2", gpus=1, python="/opt/py/bin/python3"),
        ),
    )
    _options, script = wrapped(
        plan(make_spec(kind="mpi", program="t.py"), inv, job_id=JOB).launches[0].argv
    )
    assert "source ~/venv-a/bin/activate" in arm(script, "0")
    assert "exit 126" in arm(script, "0") and "venv-a" not in arm(script, "1")
    assert "exec /opt/py/bin/python3 t.py" in arm(script, "1")
    # horovodrun --gloo forwards the launcher's HOME: the wrapper takes its own back.
    assert 'getent passwd "$(id -u)"' in script
    check = subprocess.run(["bash", "-n", "-c", script], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_rank_files_are_unpadded_and_local_ranks_count_per_host() -> None:
    p = plan(make_spec(kind="mpi", program="a.out", gpus_per_host=5), inventory(), job_id=JOB)
    assert p.world_size == 15
    paths = [log.path for log in p.launches[0].log_paths if log.rank is not None]
    assert paths[0] == f"{JD}/ranks/rank.0/stdout"
    assert paths[-1] == f"{JD}/ranks/rank.14/stderr"
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
    options, script = wrapped(launch.argv)
    assert options == (
        "horovodrun", "-np", "6", "-H", "10.0.0.1:2,10.0.0.2:2,10.0.0.3:2",
        "-p", "2022",
        "--network-interface", "eth0", "--gloo",
    )  # fmt: skip
    assert f'exec python3 "$HOME"/{JD[2:]}/example_horovod.py --steps 16' in arm(script, "4|5")
    assert launch.env["DISTCONSOLE_TOTAL_STEPS"] == "100"
    assert launch.env["DISTCONSOLE_STEPS_PER_RANK"] == "16"
    assert launch.env["DISTCONSOLE_WORLD_SIZE"] == "6"
    assert launch.log_paths[2] == LogFile(
        f"{JD}/ranks/rank.0/stdout", "stdout", "rank", 0, 0, host="n0"
    )
    # Ranks on every host run their own host's copy of the example.
    assert tuple(u for u in p.uploads if u.path.endswith("example_horovod.py")) == tuple(
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
    assert launch.log_paths[2].path == f"{JD}/ranks/rank.0/stdout"
    one = Inventory(path="h", hosts=(Host(name="solo", address="10.9.9.9", gpus=1),))
    single = plan(make_spec(kind="horovod", program="t.py"), one, job_id=JOB).launches[0]
    assert "--output-filename" not in single.argv
    assert len(single.log_paths) == 4  # the launcher's two, rank 0's two


def test_hostile_argument_stays_one_argv_item() -> None:
    hostile = "'; touch /tmp/x #"
    for kind in ("mpi", "horovod"):
        launch = plan(
            make_spec(kind=kind, program="t.py", args=[hostile]), inventory(), job_id=JOB
        ).launches[0]
        assert shlex.split(shlex.join(launch.argv)) == list(launch.argv)
        # In the wrapper: one word, quoted for the rank's shell.
        assert f"t.py {shlex.quote(hostile)} </dev/null" in wrapped(launch.argv)[1]


def test_differing_host_env_is_exported_on_that_host_only() -> None:
    p = plan(make_spec(kind="mpi", program="a.out"), inventory(), job_id=JOB)
    script = wrapped(p.launches[0].argv)[1]
    assert "HOSTVAR" not in arm(script, "0|1")
    assert "unset HOSTVAR" in arm(script, "2|3") and "unset HOSTVAR" in arm(script, "4|5")
    assert not any("every rank gets the launcher's" in w for w in p.warnings)


@pytest.mark.parametrize("kind", ["mpi", "horovod"])
def test_two_hosts_on_one_address_are_refused_naming_hosts(kind: str) -> None:
    inventory = Inventory(
        path="hosts.yaml",
        hosts=(
            Host(name="c0", address="10.0.0.5", port=2022, gpus=1),
            Host(name="c1", address="10.0.0.5", port=2022, gpus=1),
        ),
    )
    spec = make_spec(kind=kind, program="train.py", total_steps=4)
    with pytest.raises(JobSpecError) as err:
        plan(spec, inventory, job_id=JOB)
    assert err.value.field == "hosts"
    assert "c0 and c1 share the address 10.0.0.5" in str(err.value)
    # Behind different ports the hosts go by inventory name (~/.ssh/config aliases).
    behind = Inventory(
        path="hosts.yaml",
        hosts=(
            Host(name="c0", address="10.0.0.5", port=2022, gpus=1),
            Host(name="c1", address="10.0.0.5", port=2023, gpus=1),
        ),
    )
    argv = plan(spec, behind, job_id=JOB).launches[0].argv
    assert argv[argv.index("-H") + 1] == "c0:1,c1:1"
