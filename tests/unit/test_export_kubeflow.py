"""Kubeflow export: every manifest validates against Kubeflow's own SDK models, offline.

Validation is a round trip through the models: the Trainer v2 models
(``kubeflow_trainer_api``, from the ``kubeflow`` package) and the training-operator v1
models (``kubeflow-training``), whose reader drops a key it does not know and coerces
a value of the wrong type, so ``model -> dict`` must give back exactly the manifest.
The MPIJob is mpi-operator's kubeflow.org/v2beta1; the SDK models its kubeflow.org/v1
predecessor, whose spec has the same fields for what the export writes (slotsPerWorker,
runPolicy.cleanPodPolicy, mpiReplicaSpecs Launcher/Worker), so it is checked with those.

Golden files: tests/data/export/*.yaml, one per kind and API. After an intended change,
regenerate them with ``DISTCONSOLE_REGEN_EXPORT=1 python -m pytest
tests/unit/test_export_kubeflow.py tests/unit/test_export_sbatch.py`` and read the diff.
"""

from __future__ import annotations

import copy
import io
import os
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from console.errors import JobSpecError, UsageError
from console.export import job_shape, kubeflow_export, to_yaml
from console.export.kubeflow import kubernetes_name
from console.inventory import Inventory
from console.inventory import load as load_inventory
from console.jobs.spec import make_spec

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "export"
REGEN = os.environ.get("DISTCONSOLE_REGEN_EXPORT") == "1"

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
  - name: small
    address: 10.0.0.9
    gpus: 2
    tags: [small]
"""
THREE = ("gpu-a", "gpu-b", "gpu-c")

# One spec per kind, the same ones the sbatch golden files use.
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
IMAGE = "ghcr.io/acme/train:2.13-cuda12"

# (golden name, spec, api)
CASES = [
    ("trainjob-ddp", "ddp", "trainer-v2"),
    ("trainjob-mpi", "mpi", "trainer-v2"),
    ("trainjob-horovod", "horovod", "trainer-v2"),
    ("pytorchjob-ddp", "ddp", "v1"),
    ("mpijob-mpi", "mpi", "v1"),
    ("mpijob-horovod", "horovod", "v1"),
    ("tfjob-ps", "ps", "v1"),
]


@pytest.fixture
def inventory(tmp_path: Path) -> Inventory:
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS_YAML)
    return load_inventory(str(path))


def export(inventory: Inventory, spec: dict[str, Any], api: str, **options: Any) -> Any:
    shape = job_shape(make_spec(**spec), inventory)
    options.setdefault("image", IMAGE)
    return kubeflow_export(shape, api=api, **options)  # type: ignore[arg-type]


# --- validation against the SDK models -------------------------------------------


def sdk_round_trip(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest read into Kubeflow's SDK model for its kind and written back."""
    kind = manifest["kind"]
    if kind == "TrainJob":
        from kubeflow_trainer_api.models import TrainerV1alpha1TrainJob

        job = TrainerV1alpha1TrainJob.from_dict(manifest)
        assert job is not None
        return job.to_dict()
    from kubeflow.training.api_client import ApiClient

    model = {
        "PyTorchJob": "KubeflowOrgV1PyTorchJob",
        "MPIJob": "KubeflowOrgV1MPIJob",
        "TFJob": "KubeflowOrgV1TFJob",
    }[kind]
    client = ApiClient()
    obj = client._ApiClient__deserialize(manifest, model)  # type: ignore[attr-defined]
    result: dict[str, Any] = client.sanitize_for_serialization(obj)
    return result


def assert_valid(manifest: dict[str, Any]) -> None:
    assert sdk_round_trip(copy.deepcopy(manifest)) == manifest


@pytest.mark.parametrize(("golden", "which", "api"), CASES)
def test_every_kind_validates_against_the_sdk_models(
    inventory: Inventory, golden: str, which: str, api: str
) -> None:
    assert_valid(export(inventory, SPECS[which], api).manifest)


def test_the_sdk_check_fails_a_wrong_manifest(inventory: Inventory) -> None:
    # The check itself is checked: a misspelt field and a number written as text fail.
    trainjob = export(inventory, SPECS["ddp"], "trainer-v2").manifest
    trainjob["spec"]["trainer"]["numNode"] = trainjob["spec"]["trainer"].pop("numNodes")
    with pytest.raises(AssertionError):
        assert_valid(trainjob)
    pytorchjob = export(inventory, SPECS["ddp"], "v1").manifest
    pytorchjob["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = "1"
    with pytest.raises(AssertionError):
        assert_valid(pytorchjob)
    tfjob = export(inventory, SPECS["ps"], "v1").manifest
    tfjob["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["containers"][0]["cmd"] = ["x"]
    with pytest.raises(AssertionError):
        assert_valid(tfjob)


# --- golden files -------------------------------------------------------------------


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run with DISTCONSOLE_REGEN_EXPORT=1"
    assert text == path.read_text(), f"{name} changed: DISTCONSOLE_REGEN_EXPORT=1 to accept"


@pytest.mark.parametrize(("golden", "which", "api"), CASES)
def test_golden_manifest(inventory: Inventory, golden: str, which: str, api: str) -> None:
    text = to_yaml([export(inventory, SPECS[which], api).manifest])
    check_golden(f"{golden}.yaml", text)
    # The file, read back by a YAML reader, is a manifest the SDK accepts.
    assert_valid(YAML(typ="safe").load(io.StringIO((GOLDEN / f"{golden}.yaml").read_text())))


# --- what the manifests say -----------------------------------------------------------


def containers(manifest: dict[str, Any], replica: str) -> dict[str, Any]:
    specs = next(v for k, v in manifest["spec"].items() if k.endswith("ReplicaSpecs"))
    container: dict[str, Any] = specs[replica]["template"]["spec"]["containers"][0]
    return container


def env_of(items: list[dict[str, str]]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in items}


def test_trainjob_runs_torchrun_on_the_torch_runtime(inventory: Inventory) -> None:
    job = export(inventory, SPECS["ddp"], "trainer-v2").manifest
    assert job["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert job["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": "torch-distributed",
    }
    trainer = job["spec"]["trainer"]
    assert trainer["command"] == ["torchrun", "train.py"]
    # 1200 steps over 3 nodes x 4 GPUs: 100 per rank, as the planners split them.
    assert trainer["args"] == ["--lr", "0.1", "--steps", "100", "--tag", "no"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (3, 4)
    assert trainer["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": "4"}}
    env = env_of(trainer["env"])
    assert env["OMP_NUM_THREADS"] == "1" and env["PYTHONUNBUFFERED"] == "1"
    assert env["NCCL_SOCKET_IFNAME"] == "eth0" and env["NCCL_DEBUG"] == "WARN"
    assert env["DISTCONSOLE_STEPS_PER_RANK"] == "100"


def test_trainjob_mpi_uses_the_runtime_hostfile(inventory: Inventory) -> None:
    job = export(inventory, SPECS["mpi"], "trainer-v2").manifest
    assert job["spec"]["runtimeRef"]["name"] == "mpi-distributed"
    command = job["spec"]["trainer"]["command"]
    assert command[:5] == ["mpirun", "--hostfile", "/etc/mpi/hostfile", "-np", "12"]
    assert command[-1] == "/opt/bench/allreduce"
    forwarded = [command[i + 1] for i, word in enumerate(command) if word == "-x"]
    assert {"UCX_TLS", "OMP_NUM_THREADS", "PATH"} <= set(forwarded)
    other = export(inventory, SPECS["mpi"], "trainer-v2", runtime="deepspeed-distributed")
    assert other.manifest["spec"]["runtimeRef"]["name"] == "deepspeed-distributed"


def test_image_is_optional_for_a_trainjob_only(inventory: Inventory) -> None:
    job = export(inventory, SPECS["ddp"], "trainer-v2", image=None).manifest
    assert "image" not in job["spec"]["trainer"]  # the runtime's image
    assert_valid(job)
    with pytest.raises(UsageError, match="--image"):
        export(inventory, SPECS["ddp"], "v1", image=None)


def test_pytorchjob_master_and_workers(inventory: Inventory) -> None:
    job = export(inventory, SPECS["ddp"], "v1").manifest
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)
    master = containers(job, "Master")
    assert master["name"] == "pytorch" and master["image"] == IMAGE
    assert master["command"][:4] == ["torchrun", "--nnodes", "3", "--nproc-per-node"]
    assert "$(RANK)" in master["command"] and "$(MASTER_ADDR)" in master["command"]
    assert master["ports"] == [{"name": "pytorchjob-port", "containerPort": 29600}]
    assert master["resources"] == {"limits": {"nvidia.com/gpu": "4"}}
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "Running"}
    one = export(inventory, {**SPECS["ddp"], "hosts": ("gpu-a",)}, "v1").manifest
    assert list(one["spec"]["pytorchReplicaSpecs"]) == ["Master"]
    relaxed = export(inventory, {**SPECS["ddp"], "fail_fast": False}, "v1").manifest
    assert relaxed["spec"]["runPolicy"] == {"cleanPodPolicy": "None"}


def test_mpijob_launcher_and_workers(inventory: Inventory) -> None:
    job = export(inventory, SPECS["horovod"], "v1").manifest
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
    assert job["spec"]["slotsPerWorker"] == 4
    replicas = job["spec"]["mpiReplicaSpecs"]
    assert (replicas["Launcher"]["replicas"], replicas["Worker"]["replicas"]) == (1, 3)
    launcher = containers(job, "Launcher")
    # Horovod runs under mpirun (not horovodrun), its example from the package.
    assert launcher["command"][:3] == ["mpirun", "-np", "12"]
    assert launcher["command"][-3:] == ["python3", "-m", "console.examples.horovod_train"]
    assert "resources" not in launcher
    assert containers(job, "Worker")["resources"] == {"limits": {"nvidia.com/gpu": "4"}}
    assert "command" not in containers(job, "Worker")  # the image's sshd entrypoint


def test_tfjob_replicas_and_the_ps_rule(inventory: Inventory) -> None:
    job = export(inventory, SPECS["ps"], "v1").manifest
    replicas = job["spec"]["tfReplicaSpecs"]
    assert {k: v["replicas"] for k, v in replicas.items()} == {"PS": 2, "Chief": 1, "Worker": 3}
    assert "resources" not in containers(job, "PS")
    assert containers(job, "Worker")["resources"] == {"limits": {"nvidia.com/gpu": "4"}}
    ps = containers(job, "PS")
    assert ps["name"] == "tensorflow" and ps["command"] == ["python3", "ps_train.py"]
    assert ps["args"] == ["--steps", "100"]  # 300 steps over 3 workers
    assert "TF_CONFIG" not in env_of(ps["env"])  # the operator sets it
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "Running"}
    assert "successPolicy" not in job["spec"]  # with a chief, the chief decides
    no_chief = export(inventory, {**SPECS["ps"], "chief": False}, "v1").manifest
    assert no_chief["spec"]["successPolicy"] == "AllWorkers"
    assert "Chief" not in no_chief["spec"]["tfReplicaSpecs"]


def test_ps_has_no_trainer_v2_runtime(inventory: Inventory) -> None:
    with pytest.raises(UsageError, match=r"--api: .*TFJob"):
        export(inventory, SPECS["ps"], "trainer-v2", image=None)


def test_examples_need_an_image_that_carries_them(inventory: Inventory) -> None:
    with pytest.raises(UsageError, match=r"--image: example:horovod runs .*distconsole"):
        export(inventory, SPECS["horovod"], "trainer-v2", image=None)
    job = export(inventory, {**SPECS["ddp"], "program": "example:ddp"}, "trainer-v2").manifest
    assert job["spec"]["trainer"]["command"] == ["torchrun", "-m", "console.examples.ddp_train"]


def test_arguments_stay_literal(inventory: Inventory) -> None:
    # Kubernetes expands $(VAR) in command and args: a user's '$' is written '$$'.
    spec = {**SPECS["ddp"], "args": ("--out", "$(HOME)/x", "it's", "yes", "0x1f", "")}
    manifest = export(inventory, spec, "v1").manifest
    assert containers(manifest, "Master")["args"] == [
        "--out",
        "$$(HOME)/x",
        "it's",
        "yes",
        "0x1f",
        "",
    ]
    text = to_yaml([manifest])
    back = YAML(typ="safe").load(io.StringIO(text))
    assert back == manifest
    # YAML 1.1 readers (Kubernetes) would read these as a bool and a number unquoted.
    assert "- 'yes'" in text and "- '0x1f'" in text
    assert "&id" not in text  # no anchors: replicas are written out in full


def test_names_namespace_and_workdir(inventory: Inventory) -> None:
    shape = job_shape(make_spec(**{**SPECS["ddp"], "name": "My_Run.v2"}), inventory)
    out = kubeflow_export(shape, api="v1", image=IMAGE, namespace="team-a")
    assert out.manifest["metadata"] == {"name": "my-run-v2", "namespace": "team-a"}
    assert any("'my-run-v2'" in w for w in out.warnings)
    assert out.file_name == "my-run-v2.pytorchjob.yaml"
    assert kubernetes_name("7b-finetune") == "job-7b-finetune"
    assert len(kubernetes_name("x" * 64)) <= 40
    with pytest.raises(UsageError, match="--namespace"):
        kubeflow_export(shape, api="v1", image=IMAGE, namespace="Team A")
    with pytest.raises(UsageError, match="--image"):
        kubeflow_export(shape, api="v1", image="bad image")
    with pytest.raises(UsageError, match="--runtime"):
        kubeflow_export(shape, api="v1", image=IMAGE, runtime="torch-distributed")
    work = job_shape(make_spec(**{**SPECS["ddp"], "workdir": "/workspace/run"}), inventory)
    v1 = kubeflow_export(work, api="v1", image=IMAGE).manifest
    assert containers(v1, "Master")["workingDir"] == "/workspace/run"
    v2 = kubeflow_export(work, api="trainer-v2", image=IMAGE)
    assert any("--workdir" in w for w in v2.warnings)


def test_nodes_must_be_alike(inventory: Inventory) -> None:
    spec = {**SPECS["ddp"], "hosts": ("gpu-a", "small")}
    with pytest.raises(JobSpecError) as caught:
        job_shape(make_spec(**spec), inventory)
    assert caught.value.field == "gpus_per_host"
    assert "gpu-a 4, small 2" in str(caught.value)
    # One number for every node makes them alike.
    shape = job_shape(make_spec(**spec, gpus_per_host=2), inventory)
    assert (shape.nodes, shape.gpus_per_node, shape.world_size) == (2, 2, 4)


def test_warnings_are_about_the_export(tmp_path: Path) -> None:
    # The first host on loopback matters to SSH jobs only; more GPUs than listed matters.
    path = tmp_path / "hosts.yaml"
    path.write_text(
        "hosts:\n"
        "  - {name: here, address: local, gpus: 2}\n"
        "  - {name: there, address: 10.0.0.5, gpus: 2}\n"
    )
    inventory = load_inventory(str(path))
    shape = job_shape(make_spec(kind="ddp", program="t.py"), inventory)
    assert shape.warnings == ()
    shape = job_shape(make_spec(kind="ddp", program="t.py", gpus_per_host=4), inventory)
    assert shape.warnings == (
        "here: 4 GPUs per node requested but the inventory lists 2",
        "there: 4 GPUs per node requested but the inventory lists 2",
    )
