"""Kubeflow manifests for a job spec: pure functions, no cluster needed.

``--api trainer-v2`` (default) writes a Kubeflow Trainer ``TrainJob``
(trainer.kubeflow.org/v1alpha1) whose ``runtimeRef`` names a ClusterTrainingRuntime:
``torch-distributed`` for ddp, ``mpi-distributed`` for mpi and horovod (``--runtime``
names another, e.g. ``deepspeed-distributed``). The runtime starts the processes: for
torch it sets PET_NNODES / PET_NPROC_PER_NODE / PET_NODE_RANK / PET_MASTER_ADDR /
PET_MASTER_PORT, which ``torchrun`` reads; for MPI it writes ``/etc/mpi/hostfile`` and
the launcher runs ``mpirun``. Trainer v2 has no TensorFlow runtime, so ps is refused
there (``--api v1`` gives a TFJob).

``--api v1`` writes the training-operator / mpi-operator kinds
(PyTorchJob, MPIJob, TFJob: :mod:`console.export.kubeflow_v1`).

Common to all: the image (``--image``; a TrainJob may leave it to the runtime), the
program and its arguments (``{placeholders}`` replaced; every ``$`` written as ``$$`` so
Kubernetes does not expand it), ``nvidia.com/gpu`` = GPUs per node on every node pod
(ps pods ask for none), the environment the planners give (PYTHONUNBUFFERED, thread
caps, NCCL/Gloo NIC from ``--interface``, the user's ``--env``, the step budget), and
replicas from the number of hosts.

Horovod runs under ``mpirun`` (an MPI job), never ``horovodrun``: the operator gives
mpirun its hostfile and ssh, which horovodrun --gloo would need to be handed by hand.
``example:NAME`` runs ``python3 -m console.examples.NAME_train``: it needs an image with
distconsole installed, so it is refused without ``--image``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from console.errors import UsageError
from console.export.kubeflow_parts import (
    env_list,
    gpu_resources,
    metadata,
    mpirun_argv,
    program_args,
    torchrun_target,
)
from console.export.kubeflow_v1 import mpi_job, pytorch_job, tf_job
from console.export.shape import JobShape
from console.jobs.models import JobKind

Api = Literal["trainer-v2", "v1"]
APIS: tuple[Api, ...] = ("trainer-v2", "v1")

TRAINER_API_VERSION = "trainer.kubeflow.org/v1alpha1"
TRAINER_GROUP = "trainer.kubeflow.org"
CLUSTER_RUNTIME_KIND = "ClusterTrainingRuntime"
# The runtimes Kubeflow Trainer installs (manifests/base/runtimes).
DEFAULT_RUNTIMES = {
    JobKind.DDP: "torch-distributed",
    JobKind.MPI: "mpi-distributed",
    JobKind.HOROVOD: "mpi-distributed",
}
MPI_HOSTFILE = "/etc/mpi/hostfile"  # written by the Trainer's MPI plugin
# A TrainJob's pods are named <name>-node-<i>-<j>.<name>; DNS labels stop at 63.
MAX_NAME = 40

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_NOT_NAME = re.compile(r"[^a-z0-9-]+")
_IMAGE = re.compile(r"[^\s\x00-\x1f\x7f]+\Z")


@dataclass(frozen=True, slots=True)
class KubeflowExport:
    """One manifest and what the user should know about it."""

    kind: str  # TrainJob, PyTorchJob, MPIJob, TFJob
    name: str  # metadata.name
    manifest: dict[str, Any]
    warnings: tuple[str, ...]

    @property
    def file_name(self) -> str:
        return f"{self.name}.{self.kind.lower()}.yaml"


def kubernetes_name(name: str) -> str:
    """A job name as a DNS-1035 label: lowercase letters, digits and '-', starting with
    a letter, at most :data:`MAX_NAME` characters."""
    text = _NOT_NAME.sub("-", name.lower()).strip("-")
    if not text or not text[0].isalpha():
        text = f"job-{text}".rstrip("-")
    return text[:MAX_NAME].rstrip("-")


def namespace_problem(value: str) -> str | None:
    if len(value) <= 63 and _DNS_LABEL.match(value):
        return None
    return f"{value!r} is not a namespace name (lowercase letters, digits and '-', up to 63)"


def runtime_problem(value: str) -> str | None:
    if len(value) <= 253 and all(_DNS_LABEL.match(part) for part in value.split(".")):
        return None
    return f"{value!r} is not a runtime name (lowercase letters, digits, '-' and '.')"


def image_problem(value: str) -> str | None:
    if _IMAGE.match(value):
        return None
    return f"{value!r} is not an image reference (no spaces or control characters)"


def _train_job(
    shape: JobShape, name: str, namespace: str | None, image: str | None, runtime: str | None
) -> dict[str, Any]:
    kind = shape.kind
    env = shape.env(shape.spec.interface)
    if kind is JobKind.DDP:
        command = ["torchrun", *torchrun_target(shape)]
    else:
        command = mpirun_argv(shape, env, hostfile=MPI_HOSTFILE)
    trainer: dict[str, Any] = {}
    if image:
        trainer["image"] = image
    trainer["command"] = command
    args = program_args(shape)
    if args:
        trainer["args"] = args
    trainer.update(
        {
            "numNodes": shape.nodes,
            "numProcPerNode": shape.gpus_per_node,
            "resourcesPerNode": gpu_resources(shape.gpus_per_node),
            "env": env_list(env),
        }
    )
    return {
        "apiVersion": TRAINER_API_VERSION,
        "kind": "TrainJob",
        "metadata": metadata(name, namespace),
        "spec": {
            "runtimeRef": {
                "apiGroup": TRAINER_GROUP,
                "kind": CLUSTER_RUNTIME_KIND,
                "name": runtime or DEFAULT_RUNTIMES[kind],
            },
            "trainer": trainer,
        },
    }


def _workdir(shape: JobShape, api: Api, warnings: list[str]) -> str | None:
    workdir = shape.spec.workdir
    if workdir is None:
        return None
    if api == "trainer-v2":
        warnings.append(
            f"--workdir {workdir} is not part of a TrainJob (the runtime's container "
            "decides the working directory); left out"
        )
        return None
    if workdir.startswith("~"):
        warnings.append(
            f"--workdir {workdir}: a container's workingDir must be an absolute path; left out"
        )
        return None
    return workdir


def check_options(
    *, api: str, image: str | None, namespace: str | None, runtime: str | None
) -> None:
    """The options' own values, before any job is looked at (UsageError names one)."""
    if api not in APIS:
        raise UsageError("--api", f"{api!r}: choose one of {', '.join(APIS)}")
    for option, value, check in (
        ("--image", image, image_problem),
        ("--namespace", namespace, namespace_problem),
        ("--runtime", runtime, runtime_problem),
    ):
        problem = check(value) if value is not None else None
        if problem:
            raise UsageError(option, problem)
    if runtime is not None and api != "trainer-v2":
        raise UsageError("--runtime", "names a ClusterTrainingRuntime: only with --api trainer-v2")


def kubeflow_export(
    shape: JobShape,
    *,
    api: Api = "trainer-v2",
    image: str | None = None,
    namespace: str | None = None,
    runtime: str | None = None,
) -> KubeflowExport:
    """The manifest of ``shape`` for ``api``. UsageError names the option that is
    missing or wrong (``--image``, ``--namespace``, ``--runtime``, ``--api``)."""
    check_options(api=api, image=image, namespace=namespace, runtime=runtime)
    spec = shape.spec
    if api == "trainer-v2" and shape.kind is JobKind.PS:
        raise UsageError(
            "--api",
            "Kubeflow Trainer v2 has no TensorFlow parameter-server runtime; "
            "use --api v1 for a TFJob",
        )
    if image is None and shape.example_module is not None:
        raise UsageError(
            "--image",
            f"{spec.program} runs `python3 -m {shape.example_module}` from the distconsole "
            "package: give --image with an image where distconsole is installed "
            "(pip install distconsole, and torch/horovod), or export your own program",
        )
    if image is None and api == "v1":
        raise UsageError("--image", "the training-operator kinds need the container image")
    warnings = list(shape.warnings)
    name = kubernetes_name(spec.display_name)
    if spec.name and name != spec.name:
        warnings.append(f"job name {spec.name!r} is {name!r} in Kubernetes")
    workdir = _workdir(shape, api, warnings)
    if api == "trainer-v2":
        manifest = _train_job(shape, name, namespace, image, runtime)
    else:
        assert image is not None
        build = {
            JobKind.DDP: pytorch_job,
            JobKind.MPI: mpi_job,
            JobKind.HOROVOD: mpi_job,
            JobKind.PS: tf_job,
        }[shape.kind]
        manifest = build(shape, name, namespace, image, workdir)
    return KubeflowExport(
        kind=manifest["kind"], name=name, manifest=manifest, warnings=tuple(warnings)
    )
