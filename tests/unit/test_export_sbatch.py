"""Slurm export: the batch script per kind, checked by bash and golden files.

There is no Slurm here: every script is checked with ``bash -n``, compared with its
golden file (tests/data/export/*.sbatch; regenerate with ``DISTCONSOLE_REGEN_EXPORT=1``,
see test_export_kubeflow.py), and the mpi and ps scripts are also run by bash with
STAND-INS for ``srun`` and ``scontrol`` (written below: srun starts its tasks locally
with SLURM_PROCID set, scontrol prints the node list), so the quoting of every argument
and the TF_CONFIG each ps task builds from the node list are checked for real.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from console.errors import UsageError
from console.export import job_shape, sbatch_export
from console.inventory import Inventory
from console.inventory import load as load_inventory
from console.jobs.spec import make_spec

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "export"
REGEN = os.environ.get("DISTCONSOLE_REGEN_EXPORT") == "1"

# The same inventory and specs as test_export_kubeflow.py.
HOSTS_YAML = """\
defaults:
  interface: enp1s0
hosts:
  - name: gpu-a
    address: 10.0.0.1
    gpus: 4
  - name: gpu-b
    address: 10.0.0.2
    gpus: 4
  - name: gpu-c
    address: 10.0.0.3
    gpus: 4
"""
THREE = ("gpu-a", "gpu-b", "gpu-c")
SPECS: dict[str, dict[str, Any]] = {
    "ddp": {
        "kind": "ddp",
        "hosts": THREE,
        "program": "train.py",
        "args": ("--lr", "0.1", "--steps", "{steps_per_rank}", "--tag", "no"),
        "total_steps": 1200,
        "env": {"NCCL_DEBUG": "WARN"},
        "interface": "eth0",
        "master_port": 29600,
        "name": "resnet50",
    },
    "mpi": {
        "kind": "mpi",
        "hosts": THREE,
        "program": "/opt/bench/allreduce",
        "args": ("--size", "64M", "--iters", "1e3"),
        "env": {"UCX_TLS": "rc,sm"},
    },
    "horovod": {
        "kind": "horovod",
        "hosts": THREE,
        "program": "example:horovod",
        "args": ("--batch-size", "64"),
        "total_steps": 1200,
    },
    "ps": {
        "kind": "ps",
        "hosts": THREE,
        "program": "ps_train.py",
        "args": ("--steps", "{steps_per_rank}"),
        "total_steps": 300,
        "ps": 2,
        "workers": 3,
        "chief": True,
    },
}
HOSTILE = ("it's", "$(touch pwned)", "`touch pwned2`", "a b", "*", '--x="q"', "l1\nl2", "")


@pytest.fixture
def inventory(tmp_path: Path) -> Inventory:
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS_YAML)
    return load_inventory(str(path))


def script_for(inventory: Inventory, spec: dict[str, Any], **options: Any) -> str:
    return sbatch_export(job_shape(make_spec(**spec), inventory), **options).script


def bash_syntax(script: str, tmp_path: Path) -> None:
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("which", sorted(SPECS))
def test_golden_script(inventory: Inventory, which: str, tmp_path: Path) -> None:
    options = {"partition": "gpu", "time": "02:00:00"} if which == "ddp" else {}
    script = script_for(inventory, SPECS[which], **options)
    bash_syntax(script, tmp_path)
    path = GOLDEN / f"sbatch-{which}.sbatch"
    if REGEN:
        path.write_text(script)
    assert path.exists(), f"{path} is missing: run with DISTCONSOLE_REGEN_EXPORT=1"
    assert script == path.read_text(), f"{path.name} changed: DISTCONSOLE_REGEN_EXPORT=1"


def test_ddp_script(inventory: Inventory) -> None:
    script = script_for(inventory, SPECS["ddp"], partition="gpu", time="02:00:00")
    lines = script.splitlines()
    for line in (
        "#SBATCH --job-name=resnet50",
        "#SBATCH --nodes=3",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=02:00:00",
        "export OMP_NUM_THREADS=1",
        "export NCCL_SOCKET_IFNAME=eth0",
        "export NCCL_DEBUG=WARN",
        "export DISTCONSOLE_STEPS_PER_RANK=100",
    ):
        assert line in lines
    command = " ".join(line.rstrip("\\ ").strip() for line in lines[-4:])
    assert command.startswith("srun --kill-on-bad-exit=1 --ntasks-per-node=1 torchrun ")
    assert '--nnodes "$SLURM_NNODES" --nproc-per-node 4' in command
    assert "port=29600" in lines  # the spec's --master-port
    assert '--rdzv-backend c10d --rdzv-endpoint "$head:$port"' in command
    # torchrun prefixes each worker line with its global rank ("[rank3]: ")
    assert "export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${rank}]: '" in lines
    assert "--tee 3 train.py" in command
    assert command.endswith("train.py --lr 0.1 --steps 100 --tag no")
    relaxed = script_for(inventory, {**SPECS["ddp"], "fail_fast": False})
    assert "--kill-on-bad-exit=0" in relaxed


def test_interface_falls_back_to_the_hosts(inventory: Inventory) -> None:
    # sbatch runs on the inventory's machines: their common interface applies.
    spec = {k: v for k, v in SPECS["mpi"].items() if k != "interface"}
    assert "export NCCL_SOCKET_IFNAME=enp1s0" in script_for(inventory, spec).splitlines()


def test_sbatch_values_are_plain_words(inventory: Inventory) -> None:
    shape = job_shape(make_spec(**SPECS["mpi"]), inventory)
    with pytest.raises(UsageError, match="--partition"):
        sbatch_export(shape, partition="gpu\n#SBATCH --exclusive")
    with pytest.raises(UsageError, match="--time"):
        sbatch_export(shape, time="1 day")


# --- run under stand-ins for srun and scontrol ---------------------------------------

SRUN_STANDIN = """\
#!{python}
# STAND-IN for srun (no Slurm here): runs the command as --ntasks tasks (or
# --ntasks-per-node x SLURM_NNODES), each with SLURM_PROCID set; exits with the worst status.
import os, subprocess, sys
args = sys.argv[1:]
options = {{}}
while args and args[0].startswith("-"):
    key, _, value = args.pop(0).partition("=")
    options[key] = value
if "--ntasks" in options:
    n = int(options["--ntasks"])
else:
    n = int(options.get("--ntasks-per-node", "1")) * int(os.environ["SLURM_NNODES"])
procs = [
    subprocess.Popen(args, env={{**os.environ, "SLURM_PROCID": str(k)}}) for k in range(n)
]
sys.exit(max(p.wait() for p in procs))
"""
SCONTROL_STANDIN = """\
#!/bin/bash
# STAND-IN for scontrol: `scontrol show hostnames LIST` prints LIST's comma-separated names.
[ "$1 $2" = "show hostnames" ] && tr , '\\n' <<<"$3"
"""
# The program every task runs: writes what it was given into $OUT.
REPORT = (
    "import json, os, sys; e = os.environ; "
    "name = e.get('DISTCONSOLE_TASK_TYPE', 'rank') + '-' + "
    "e.get('DISTCONSOLE_TASK_INDEX', e['SLURM_PROCID']); "
    "open(os.path.join(e['OUT'], name + '.json'), 'w').write(json.dumps("
    "{'argv': sys.argv[1:], 'tf': e.get('TF_CONFIG'), 'msg': e.get('MSG'), "
    "'omp': e.get('OMP_NUM_THREADS')}))"
)


def run_with_standins(
    script: str, tmp_path: Path, nodes: list[str], job_id: str = "4242"
) -> dict[str, Any]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(SRUN_STANDIN.format(python=sys.executable))
    (bin_dir / "scontrol").write_text(SCONTROL_STANDIN)
    for tool in ("srun", "scontrol"):
        (bin_dir / tool).chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_NODELIST": ",".join(nodes),
        "SLURM_NNODES": str(len(nodes)),
        "SLURM_JOB_ID": job_id,
        "OUT": str(out),
    }
    done = subprocess.run(
        ["bash", str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    return {p.stem: json.loads(p.read_text()) for p in out.iterdir()}


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_mpi_ranks_get_every_argument_verbatim(inventory: Inventory, tmp_path: Path) -> None:
    spec = {
        **SPECS["mpi"],
        "program": sys.executable,
        "args": ("-c", REPORT, *HOSTILE, "{world_size}"),
        "env": {"MSG": 'it\'s $HOME `x` "q"'},
    }
    script = script_for(inventory, spec)
    bash_syntax(script, tmp_path)
    reports = run_with_standins(script, tmp_path, ["node-a", "node-b", "node-c"])
    assert set(reports) == {f"rank-{k}" for k in range(12)}  # 3 nodes x 4 GPUs
    for report in reports.values():
        assert report["argv"] == [*HOSTILE, "12"]
        assert report["msg"] == 'it\'s $HOME `x` "q"'
        assert report["omp"] == "1"


def test_ps_tasks_get_roles_and_tf_config(inventory: Inventory, tmp_path: Path) -> None:
    spec = {**SPECS["ps"], "program": sys.executable, "args": ("-c", REPORT, *HOSTILE)}
    script = script_for(inventory, spec)
    assert "#SBATCH --nodes=3" in script and "#SBATCH --ntasks-per-node=2" in script
    nodes = ["node-a", "node-b", "node-c"]
    reports = run_with_standins(script, tmp_path, nodes)
    assert sorted(reports) == ["chief-0", "ps-0", "ps-1", "worker-0", "worker-1", "worker-2"]
    # Task k of (ps 0, ps 1, chief, worker 0..2) listens on P+k, P derived from the job
    # id with no --master-port (20000 + 4242 % (20000 // 6) * 6 = 25454); each step
    # places its tasks round-robin over the nodes (ps i on node i, chief/worker j on j).
    cluster = {
        "ps": ["node-a:25454", "node-b:25455"],
        "worker": ["node-b:25457", "node-c:25458", "node-a:25459"],
        "chief": ["node-a:25456"],
    }
    for name, report in reports.items():
        kind, index = name.split("-")
        assert json.loads(report["tf"]) == {
            "cluster": cluster,
            "task": {"type": kind, "index": int(index)},
        }
        assert report["argv"] == list(HOSTILE)


def test_ps_without_chief_on_fewer_tasks_than_nodes(inventory: Inventory, tmp_path: Path) -> None:
    spec = {
        **SPECS["ps"],
        "chief": False,
        "ps": 1,
        "workers": 2,
        "program": sys.executable,
        "args": ("-c", REPORT),
        "master_port": 29500,
    }
    script = script_for(inventory, spec)
    assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks-per-node=1" in script
    reports = run_with_standins(script, tmp_path, ["node-a", "node-b"])
    assert json.loads(reports["worker-1"]["tf"]) == {
        "cluster": {"ps": ["node-a:29500"], "worker": ["node-a:29501", "node-b:29502"]},
        "task": {"type": "worker", "index": 1},
    }
    assert sorted(reports) == ["ps-0", "worker-0", "worker-1"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_ports_follow_the_job_id_without_master_port(inventory: Inventory, tmp_path: Path) -> None:
    """Two jobs on the same node get different rendezvous ports (a fixed 29500 would
    collide); PS jobs get disjoint ranges; --master-port still wins."""
    port_report = (
        "import os; e = os.environ; "
        "open(os.path.join(e['OUT'], 'port'), 'w').write(e['MASTER_PORT'])"
    )
    spec = {k: v for k, v in SPECS["ddp"].items() if k != "master_port"}
    script = script_for(inventory, {**spec, "program": sys.executable, "args": ("-c", port_report)})
    assert "port=29600" not in script
    seen = {}
    for job_id in ("7", "8", "20007"):
        out = tmp_path / job_id
        out.mkdir()
        seen[job_id] = run_port(script, out, job_id)
    assert seen == {"7": 20007, "8": 20008, "20007": 20007}
    ps_ports = {}
    ps_spec = {k: v for k, v in SPECS["ps"].items() if k != "master_port"}
    for job_id in ("7", "8"):
        out = tmp_path / f"ps{job_id}"
        out.mkdir()
        reports = run_with_standins(
            script_for(inventory, {**ps_spec, "program": sys.executable, "args": ("-c", REPORT)}),
            out,
            ["node-a", "node-b", "node-c"],
            job_id=job_id,
        )
        cluster = json.loads(reports["ps-0"]["tf"])["cluster"]
        ps_ports[job_id] = {
            int(a.rpartition(":")[2]) for addresses in cluster.values() for a in addresses
        }
    assert ps_ports["7"] == set(range(20042, 20048))  # 6 tasks: 20000 + 7 * 6
    assert ps_ports["8"] == set(range(20048, 20054))
    fixed = script_for(inventory, {**SPECS["ps"], "master_port": 31000})
    assert "port=31000" in fixed.splitlines()


def run_port(script: str, tmp_path: Path, job_id: str) -> int:
    """Run a DDP script under the stand-ins with torchrun replaced by the task program
    (``--no-python``): what MASTER_PORT each task sees."""
    reports = tmp_path / "out"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(SRUN_STANDIN.format(python=sys.executable))
    (bin_dir / "scontrol").write_text(SCONTROL_STANDIN)
    # STAND-IN for torchrun: runs the program after its options with this Python.
    (bin_dir / "torchrun").write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        "args = sys.argv[1:]\n"
        "program = args.index('--no-python') if '--no-python' in args else None\n"
        "os.execv(args[program + 1], args[program + 1:])\n"
    )
    for tool in ("srun", "scontrol", "torchrun"):
        (bin_dir / tool).chmod(0o755)
    reports.mkdir()
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_NODELIST": "node-a",
        "SLURM_NNODES": "1",
        "SLURM_JOB_ID": job_id,
        "OUT": str(reports),
    }
    done = subprocess.run(
        ["bash", str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return int((reports / "port").read_text())
