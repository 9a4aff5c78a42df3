"""Exporters: the same job spec as manifests or scripts for other schedulers.

Pure functions of a :class:`~console.jobs.spec.JobSpec` and the inventory (no network):
:func:`job_shape` reads the job's shape (nodes, GPUs per node, environment, program),
:func:`kubeflow_export` writes a Kubeflow TrainJob / PyTorchJob / MPIJob / TFJob,
:func:`sbatch_export` a standalone Slurm batch script. ``distconsole export`` is the
command (console/commands/export.py).
"""

from __future__ import annotations

from console.export.kubeflow import KubeflowExport, kubeflow_export
from console.export.sbatch import SbatchExport, sbatch_export
from console.export.shape import JobShape, job_shape
from console.export.yaml_text import to_yaml

__all__ = [
    "JobShape",
    "KubeflowExport",
    "SbatchExport",
    "job_shape",
    "kubeflow_export",
    "sbatch_export",
    "to_yaml",
]
