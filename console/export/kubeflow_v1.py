"""``--api v1``: the training-operator / mpi-operator kinds of a job spec.

- ddp: ``PyTorchJob`` (kubeflow.org/v1), a Master and N-1 Workers, each running
  ``torchrun --node-rank $(RANK) --master-addr $(MASTER_ADDR) --master-port
  $(MASTER_PORT)`` (the operator sets those; Kubernetes expands ``$(VAR)``);
- mpi, horovod: ``MPIJob`` (kubeflow.org/v2beta1, mpi-operator v2), a Launcher running
  ``mpirun`` and N Workers with ``slotsPerWorker`` = GPUs per node. Worker pods run the
  image's entrypoint, which must start sshd as mpi-operator v2 requires;
- ps: ``TFJob`` (kubeflow.org/v1), PS / Chief / Worker replica specs. The operator sets
  TF_CONFIG; ``cleanPodPolicy: Running`` removes the ps pods when the job ends, and
  without a chief ``successPolicy: AllWorkers`` makes every worker's success the job's
  (the console's PS rule).

:mod:`console.export.kubeflow` checks the options and picks the builder.
"""

from __future__ import annotations

from typing import Any

from console.export.kubeflow_parts import (
    env_list,
    gpu_resources,
    metadata,
    mpirun_argv,
    program_args,
    program_argv,
    torchrun_target,
)
from console.export.shape import JobShape

TRAINING_OPERATOR_API_VERSION = "kubeflow.org/v1"
MPI_OPERATOR_API_VERSION = "kubeflow.org/v2beta1"
PYTORCH_CONTAINER = "pytorch"  # the names the operators look for
PYTORCH_PORT_NAME = "pytorchjob-port"
TF_CONTAINER = "tensorflow"


def _container(
    name: str,
    image: str,
    command: list[str] | None,
    args: list[str],
    env: dict[str, str],
    gpus: int,
    workdir: str | None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": image}
    if command:
        container["command"] = command
    if args:
        container["args"] = args
    if workdir:
        container["workingDir"] = workdir
    container["env"] = env_list(env)
    if gpus:
        container["resources"] = gpu_resources(gpus)
    return container


def _replica(replicas: int, container: dict[str, Any]) -> dict[str, Any]:
    return {
        "replicas": replicas,
        "restartPolicy": "Never",  # as the console: a rank that fails is not restarted
        "template": {"spec": {"containers": [container]}},
    }


def _run_policy(shape: JobShape) -> dict[str, Any]:
    # Fail-fast: when the job fails (or ends), the pods still running are deleted.
    return {"cleanPodPolicy": "Running" if shape.spec.fail_fast else "None"}


def pytorch_job(
    shape: JobShape, name: str, namespace: str | None, image: str, workdir: str | None
) -> dict[str, Any]:
    command = [
        "torchrun",
        "--nnodes",
        str(shape.nodes),
        "--nproc-per-node",
        str(shape.gpus_per_node),
        "--node-rank",
        "$(RANK)",
        "--master-addr",
        "$(MASTER_ADDR)",
        "--master-port",
        "$(MASTER_PORT)",
        *torchrun_target(shape),
    ]
    env = shape.env(shape.spec.interface)
    container = _container(
        PYTORCH_CONTAINER, image, command, program_args(shape), env, shape.gpus_per_node, workdir
    )
    container["ports"] = [{"name": PYTORCH_PORT_NAME, "containerPort": shape.master_port}]
    replicas = {"Master": _replica(1, container)}
    if shape.nodes > 1:
        replicas["Worker"] = _replica(shape.nodes - 1, container)
    return {
        "apiVersion": TRAINING_OPERATOR_API_VERSION,
        "kind": "PyTorchJob",
        "metadata": metadata(name, namespace),
        "spec": {
            "runPolicy": _run_policy(shape),
            "nprocPerNode": str(shape.gpus_per_node),
            "pytorchReplicaSpecs": replicas,
        },
    }


def mpi_job(
    shape: JobShape, name: str, namespace: str | None, image: str, workdir: str | None
) -> dict[str, Any]:
    env = shape.env(shape.spec.interface)
    # mpi-operator v2 points Open MPI at its hostfile (OMPI_MCA_orte_default_hostfile).
    launcher = _container(
        "launcher",
        image,
        mpirun_argv(shape, env, hostfile=None),
        program_args(shape),
        env,
        0,
        workdir,
    )
    worker = _container("worker", image, None, [], env, shape.gpus_per_node, workdir)
    return {
        "apiVersion": MPI_OPERATOR_API_VERSION,
        "kind": "MPIJob",
        "metadata": metadata(name, namespace),
        "spec": {
            "slotsPerWorker": shape.gpus_per_node,
            "runPolicy": _run_policy(shape),
            "mpiReplicaSpecs": {
                "Launcher": _replica(1, launcher),
                "Worker": _replica(shape.nodes, worker),
            },
        },
    }


def tf_job(
    shape: JobShape, name: str, namespace: str | None, image: str, workdir: str | None
) -> dict[str, Any]:
    env = shape.env(shape.spec.interface)
    command, args = program_argv(shape), program_args(shape)

    def task(gpus: int) -> dict[str, Any]:
        return _container(TF_CONTAINER, image, command, args, env, gpus, workdir)

    replicas = {"PS": _replica(shape.ps_tasks, task(0))}
    if shape.spec.chief:
        replicas["Chief"] = _replica(1, task(shape.gpus_per_node))
    replicas["Worker"] = _replica(shape.workers, task(shape.gpus_per_node))
    spec: dict[str, Any] = {"runPolicy": {"cleanPodPolicy": "Running"}}
    if not shape.spec.chief:
        spec["successPolicy"] = "AllWorkers"
    spec["tfReplicaSpecs"] = replicas
    return {
        "apiVersion": TRAINING_OPERATOR_API_VERSION,
        "kind": "TFJob",
        "metadata": metadata(name, namespace),
        "spec": spec,
    }
