"""`distconsole plan` as a user runs it: a real subprocess on a real hosts.yaml."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

HOSTS_YAML = """\
defaults:
  work_dir: ~/dc
hosts:
  - name: n0
    address: 10.0.0.1
    gpus: 2
  - name: n1
    address: 10.0.0.2
    gpus: 2
    tags: [fast]
"""


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS_YAML)
    return path


def distconsole(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "console.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_json_plan_for_ddp(hosts: Path) -> None:
    hostile = "'; touch /tmp/x #"
    done = distconsole(
        "plan", hosts, "--kind", "ddp", "--env", "K=v", "--total-steps", "10",
        "--master-port", "29400", "--json", "--", "train.py", "--steps", "{steps_per_rank}",
        hostile,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert {"kind", "world_size", "steps_per_rank", "launches"} <= set(data)
    assert (data["kind"], data["world_size"], data["steps_per_rank"]) == ("ddp", 4, 2)
    assert data["steps_dropped"] == 2
    assert [x["host"] for x in data["launches"]] == ["n0", "n1"]
    first = data["launches"][0]
    assert {"host", "role", "argv", "env", "log_paths"} <= set(first)
    assert first["role"] == "torchrun"
    assert first["argv"][-3:] == ["--steps", "2", hostile]
    assert first["env"]["K"] == "v" and first["env"]["MASTER_PORT"] == "29400"
    assert shlex.split(first["command"])[-1] == hostile
    assert first["log_paths"][0]["path"].startswith("~/dc/.distconsole/jobs/")


def test_human_plan_shows_each_host_command_and_env(hosts: Path) -> None:
    done = distconsole("plan", hosts, "--kind", "mpi", "--hosts", "n1,n0", "--", "a.out", "x y")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "[n1] launcher 0 ranks 0-3" in out
    assert "  env: OMP_NUM_THREADS=1" in out
    assert "$ mpirun -np 4 -H 10.0.0.2:2,10.0.0.1:2 " in out
    lines = out.rstrip().splitlines()
    # The hang hook travels to the launcher host; the uploads close the plan.
    uploads = [i for i, line in enumerate(lines) if line.startswith("upload: ")]
    assert uploads and lines[uploads[0]].startswith("upload: hang_sitecustomize.py -> n1:~/dc/")
    host_section = [line for line in lines[: uploads[0]] if line.strip()]
    assert host_section[-1].startswith("  log (")
    # Each rank's line sits in the single-quoted per-rank script mpirun runs.
    assert "exec a.out " + shlex.quote("x y").replace("'", "'\"'\"'") + " </dev/null" in out


def test_ps_plan_by_tag(hosts: Path) -> None:
    done = distconsole(
        "plan", hosts, "--kind", "ps", "--tag", "fast", "--ps", "1", "--workers", "2",
        "--chief", "--json", "--", "example:ps",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [x["role"] for x in data["launches"]] == ["ps", "chief", "worker", "worker"]
    assert {x["host"] for x in data["launches"]} == {"n1"}
    assert data["uploads"][0]["resource"] == "ps_train.py"


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--kind", "ddp", "--gpus-per-host", "0"], "--gpus-per-host:"),
        (["--kind", "ddp", "--gpus-per-host", "many"], "--gpus-per-host:"),
        (["--kind", "fsdp"], "--kind:"),
        (["--gpus-per-host", "1"], "--kind:"),
        (["--kind", "ddp", "--env", "NOEQUALS"], "--env:"),
        (["--kind", "ddp", "--env", "1X=2"], "--env:"),
        (["--kind", "ddp", "--master-port", "22"], "--master-port:"),
        (["--kind", "ddp", "--hosts", "n0,ghost"], "--hosts:"),
        (["--kind", "ddp", "--tag", "slow"], "--tag:"),
        (["--kind", "ddp", "--total-steps", "-1"], "--total-steps:"),
        (["--kind", "horovod", "--total-steps", "3"], "--total-steps:"),
        (["--kind", "ddp", "--ps", "2"], "--ps:"),
        (["--kind", "ps", "--workers", "0"], "--workers:"),
        (["--kind", "horovod", "--horovod-launcher", "ssh"], "--horovod-launcher:"),
        (["--kind", "ddp", "--interface", "eth0;reboot"], "--interface:"),
        (["--kind", "ddp", "--workdir", "rel/dir"], "--workdir:"),
        (["--kind", "ddp", "--name", "has space"], "--name:"),
        (["--kind", "ddp", "--bogus"], "--bogus"),
    ],
)
def test_bad_option_exits_2_naming_it(hosts: Path, args: list[str], named: str) -> None:
    done = distconsole("plan", hosts, *args, "--", "train.py")
    assert done.returncode == 2
    assert named in done.stderr
    assert done.stdout == ""


def test_missing_program_exits_2(hosts: Path) -> None:
    done = distconsole("plan", hosts, "--kind", "ddp")
    assert done.returncode == 2
    assert "PROGRAM" in done.stderr


def test_missing_inventory_exits_2(tmp_path: Path) -> None:
    done = distconsole("plan", tmp_path / "nope.yaml", "--kind", "ddp", "--", "t.py")
    assert done.returncode == 2
    assert "nope.yaml" in done.stderr
