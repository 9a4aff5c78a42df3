"""The pieces every Kubeflow manifest is built from, whichever API writes it: the
program as argv in the image, ``torchrun``'s target, ``mpirun``'s argv, a container's
environment and GPU limit, metadata. ``$`` is doubled wherever Kubernetes would expand it.
"""

from __future__ import annotations

from typing import Any

from console.export.shape import JobShape

GPU_RESOURCE = "nvidia.com/gpu"
PYTHON = "python3"
MPI_FORWARDED = ("PATH", "LD_LIBRARY_PATH")


def literal(text: str) -> str:
    """``$`` doubled: Kubernetes expands ``$(VAR)`` in command and args, ``$$`` is ``$``."""
    return text.replace("$", "$$")


def program_argv(shape: JobShape) -> list[str]:
    """The program as argv in the image (``python3 script.py``, ``python3 -m MODULE``)."""
    module = shape.example_module
    if module is not None:
        return [PYTHON, "-m", module]
    program = literal(shape.spec.program)
    if program.endswith(".py"):
        return [PYTHON, program]
    return [program]


def torchrun_target(shape: JobShape) -> list[str]:
    module = shape.example_module
    if module is not None:
        return ["-m", module]
    program = literal(shape.spec.program)
    if program.endswith(".py"):
        return [program]
    return ["--no-python", program]


def program_args(shape: JobShape) -> list[str]:
    return [literal(a) for a in shape.args]


def env_list(env: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in env.items()]


def gpu_resources(gpus: int) -> dict[str, Any]:
    return {"limits": {GPU_RESOURCE: str(gpus)}}


def metadata(name: str, namespace: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return meta


def mpirun_argv(shape: JobShape, env: dict[str, str], *, hostfile: str | None) -> list[str]:
    argv = ["mpirun"]
    if hostfile:
        argv += ["--hostfile", hostfile]
    argv += ["-np", str(shape.world_size), "--bind-to", "none"]
    if shape.spec.interface:
        argv += ["--mca", "btl_tcp_if_include", shape.spec.interface]
    for name in dict.fromkeys([*MPI_FORWARDED, *env]):
        argv += ["-x", name]
    return argv + program_argv(shape)
