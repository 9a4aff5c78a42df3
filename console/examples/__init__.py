"""Bundled example training programs (package data), runnable on CPU in seconds.

``example:ddp`` / ``example:horovod`` / ``example:ps`` in a job spec refer to these;
the runner copies one into the job directory (``JobPlan.uploads``) with
:func:`example_source`. They only need Python, torch (and horovod for the Horovod one)
on the hosts, never this package.
"""

from __future__ import annotations

from importlib import resources

EXAMPLE_FILES = {
    "ddp": "ddp_train.py",
    "horovod": "horovod_train.py",
    "ps": "ps_train.py",
}


def example_source(resource: str) -> bytes:
    """The bytes of a bundled file, by its name (``ddp_train.py``)."""
    if resource not in EXAMPLE_FILES.values():
        raise KeyError(f"no bundled example named {resource!r}")
    return resources.files(__name__).joinpath(resource).read_bytes()
