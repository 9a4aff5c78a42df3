"""`distconsole export` as a user runs it: a real subprocess on a real hosts.yaml."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[2]
HOSTS_YAML = """\
hosts:
  - name: n0
    address: 10.0.0.1
    gpus: 2
  - name: n1
    address: 10.0.0.2
    gpus: 2
  - name: big
    address: 10.0.0.3
    gpus: 8
"""


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS_YAML)
    return path


def distconsole(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "console", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_prints_a_trainjob(hosts: Path) -> None:
    done = distconsole(
        "export", hosts, "--to", "kubeflow", "--hosts", "n0,n1", "--kind", "ddp",
        "--", "train.py", "--lr", "0.1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    manifest = YAML(typ="safe").load(io.StringIO(done.stdout))
    assert manifest["kind"] == "TrainJob"
    assert manifest["spec"]["trainer"]["numNodes"] == 2
    assert manifest["spec"]["trainer"]["command"] == ["torchrun", "train.py"]
    assert done.stderr == ""


def test_out_writes_the_file(hosts: Path, tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    done = distconsole(
        "export", hosts, "--to", "kubeflow", "--api", "v1", "--image", "img:1",
        "--namespace", "ml", "--hosts", "n0,n1", "--kind", "ps", "--out", out,
        "--", "ps.py",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    path = out / "ps-ps.tfjob.yaml"
    assert done.stdout.strip() == str(path)
    manifest = YAML(typ="safe").load(path.read_text())
    assert manifest["metadata"] == {"name": "ps-ps", "namespace": "ml"}
    done = distconsole(
        "export", hosts, "--to", "sbatch", "--hosts", "n0,n1", "--kind", "mpi",
        "--partition", "gpu", "--out", out, "--", "./bench",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    script = out / "mpi-bench.sbatch"
    assert done.stdout.strip() == str(script)
    assert os.access(script, os.X_OK)
    assert "#SBATCH --partition=gpu" in script.read_text().splitlines()
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (("--kind", "ddp"), "--to: choose one of kubeflow, sbatch"),
        (("--to", "helm", "--kind", "ddp"), "--to: 'helm'"),
        (("--to", "kubeflow", "--api", "v3", "--kind", "ddp"), "--api: 'v3'"),
        (("--to", "kubeflow", "--kind", "ps"), "--api: Kubeflow Trainer v2 has no"),
        (("--to", "kubeflow", "--api", "v1", "--kind", "ddp"), "--image:"),
        (("--to", "kubeflow", "--kind", "ddp", "--partition", "gpu"), "--partition: does not"),
        (("--to", "sbatch", "--kind", "ddp", "--image", "x"), "--image: does not apply"),
        (("--to", "sbatch", "--kind", "ddp", "--time", "1 day"), "--time:"),
        (("--to", "kubeflow", "--kind", "ddp", "--namespace", "A_B"), "--namespace:"),
        # Every host: n0/n1 have 2 GPUs, big 8; the option that fixes it is named.
        (("--to", "sbatch", "--kind", "ddp"), "--gpus-per-host: the chosen hosts have"),
        (("--to", "sbatch", "--kind", "ddp", "--total-steps", "2"), "--total-steps:"),
        (("--to", "sbatch", "--kind", "dp"), "--kind:"),
    ],
)
def test_bad_input_names_the_option(hosts: Path, args: tuple[str, ...], names: str) -> None:
    if "--gpus-per-host" not in names:
        args = (*args, "--hosts", "n0,n1")
    done = distconsole("export", hosts, *args, "--", "train.py")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"distconsole export: {names}"), done.stderr
    assert done.stdout == ""


def test_example_without_an_image_is_refused(hosts: Path) -> None:
    done = distconsole(
        "export",
        hosts,
        "--to",
        "kubeflow",
        "--kind",
        "ddp",
        "--hosts",
        "n0,n1",
        "--",
        "example:ddp",
    )
    assert done.returncode == 2
    assert "--image: example:ddp runs `python3 -m console.examples.ddp_train`" in done.stderr


def test_warnings_go_to_stderr(hosts: Path) -> None:
    done = distconsole(
        "export", hosts, "--to", "sbatch", "--kind", "horovod", "--gpus-per-host", "2",
        "--", "hvd.py",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "distconsole export: warning: horovod ranks start under MPI" in done.stderr
    assert done.stdout.startswith("#!/bin/bash\n")


def test_sync_is_said_not_to_travel_with_the_export(hosts: Path, tmp_path: Path) -> None:
    for target, where in (("sbatch", "on the nodes' shared filesystem"), ("kubeflow", "image")):
        done = distconsole(
            "export", hosts, "--to", target, "--hosts", "n0,n1", "--kind", "ddp",
            "--sync", tmp_path, "--", "train.py",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"distconsole export: warning: --sync {tmp_path} is not exported" in done.stderr
        assert where in done.stderr


def test_hang_options_are_said_not_to_travel_with_the_export(hosts: Path) -> None:
    base = ("export", hosts, "--to", "sbatch", "--kind", "ddp", "--gpus-per-host", "1")
    quiet = distconsole(*base, "--", "train.py")
    assert quiet.returncode == 0, quiet.stderr
    assert "hang" not in quiet.stderr
    for given, said in (
        (("--hang-timeout", "60"), "--hang-timeout 60 is not exported"),
        (("--stop-on-hang",), "--stop-on-hang is not exported"),
        (
            ("--hang-timeout", "30", "--stop-on-hang"),
            "--hang-timeout 30 and --stop-on-hang are not exported",
        ),
    ):
        done = distconsole(*base, *given, "--", "train.py")
        assert done.returncode == 0, done.stderr
        assert f"distconsole export: warning: {said}: the hang check runs" in done.stderr


def test_help_lists_every_option_once() -> None:
    done = distconsole("export", "--help")
    assert done.returncode == 0, done.stderr
    for option in ("--to", "--api", "--image", "--namespace", "--out", "--partition", "--kind"):
        assert f"{option} " in done.stdout or f"{option}\n" in done.stdout
    assert done.stdout.count("--help") == 1
