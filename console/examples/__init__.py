"""Bundled example training programs (package data), runnable on CPU in seconds.

``example:ddp`` / ``example:horovod`` / ``example:mpi`` / ``example:ps`` / ``example:ray``
in a job spec refer to these; the runner copies one into the job directory
(``JobPlan.uploads``). What each imports on the hosts (pre-flight checks it:
``console.jobs.preflight.job.EXAMPLE_NEEDS``): torch (ddp, horovod), horovod, ray; the
mpi and ps examples only the standard library. Never this package.
"""

from __future__ import annotations

from importlib import resources

EXAMPLE_FILES = {
    "ddp": "ddp_train.py",
    "horovod": "horovod_train.py",
    "mpi": "mpi_train.py",
    "ps": "ps_train.py",
    "ray": "ray_train.py",
}


def example_source(resource: str) -> bytes:
    """The bytes of a bundled file, by its name (``ddp_train.py``)."""
    if resource not in EXAMPLE_FILES.values():
        raise KeyError(f"no bundled example named {resource!r}")
    return resources.files(__name__).joinpath(resource).read_bytes()
