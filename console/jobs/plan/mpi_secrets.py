"""The user's ``--env`` values under ``horovodrun --gloo``, kept out of every argv.

horovodrun --gloo starts each rank as ``env NAME=VALUE ... COMMAND`` with its whole
environment (horovod/runner/gloo_run.py, 0.28): in ssh's command line on the launcher
host and in a shell's on the others, so any value in the launcher's environment is in
``ps`` on every host of the job for as long as it runs. Under it, the values the user
gave (``--env``, ``--env-file``) reach each rank from a 0600 file in its own host's job
directory (an upload of the plan, sourced by the rank's wrapper: ``mpi_ranks.py``)
instead of through horovodrun. What horovodrun reads itself stays in its environment:
its settings (``HOROVOD_*``) and the search paths. mpirun, and horovodrun --mpi which
runs it, forward with ``-x NAME``: names only, never values.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from console.jobs.models import JobKind, Upload
from console.jobs.plan.placement import Placement

SECRET_ENV_FILE = "env.secret"  # .secret: never packed into a report bundle
SECRET_ENV_RESOURCE = "the job's --env values"  # what `plan` names the upload
LAUNCHER_READS = frozenset({"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "HOME"})
LAUNCHER_PREFIX = "HOROVOD_"


def uses_env_file(p: Placement) -> bool:
    """horovodrun --gloo, Horovod elastic's launcher included (it needs gloo)."""
    return p.spec.kind is JobKind.HOROVOD and p.spec.horovod_launcher == "gloo"


def hidden_env(p: Placement, env: Mapping[str, str]) -> dict[str, str]:
    """The user's values that travel in the file: those the job's environment keeps as
    given (a value the job cannot run without wins over the user's), less horovodrun's
    own."""
    if not uses_env_file(p):
        return {}
    return {
        key: value
        for key, value in p.spec.env.items()
        if env.get(key) == value
        and key not in LAUNCHER_READS
        and not key.startswith(LAUNCHER_PREFIX)
    }


def env_file_path(job_dir: str) -> str:
    return f"{job_dir}/{SECRET_ENV_FILE}"


def env_file_uploads(p: Placement, hidden: Mapping[str, str]) -> tuple[Upload, ...]:
    """The file on every host of the job (each rank sources its own host's)."""
    if not hidden:
        return ()
    text = "".join(f"export {key}={shlex.quote(value)}\n" for key, value in hidden.items())
    return tuple(
        Upload(host=h.name, path=env_file_path(h.job_dir), resource=SECRET_ENV_RESOURCE, data=text)
        for h in p.hosts
    )
