"""The user's ``--env`` values under ``horovodrun --gloo``, kept out of every argv.

horovodrun --gloo starts each rank as ``env NAME=VALUE ... COMMAND`` with its whole
environment (horovod/runner/gloo_run.py, 0.28): in ssh's command line on the launcher
host and in a shell's on the others, so any value in the launcher's environment is in
``ps`` on every host of the job for as long as it runs. Under it, the values the user
gave (``--env``, ``--env-file``) and each host's inventory ``env`` reach each rank from
a 0600 file in its own host's job directory (an upload of the plan, sourced by the
rank's wrapper: ``mpi_ranks.py``) instead of through horovodrun or the wrapper's text
(itself in horovodrun's argv). What horovodrun reads itself stays in its environment:
its settings (``HOROVOD_*``) and the search paths. mpirun, and horovodrun --mpi which
runs it, forward with ``-x NAME``: names only, never values; under them the file holds
a host's inventory values that differ from the launcher host's.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from console.jobs.models import JobKind, Upload
from console.jobs.plan.placement import Placement

SECRET_ENV_FILE = "env.secret"  # .secret: never packed into a report bundle
# One per host (``env.HOST.secret``): hosts that share a home share the job directory.
SECRET_ENV_RESOURCE = "the job's --env values"  # what `plan` names the upload
LAUNCHER_READS = frozenset({"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "HOME"})
LAUNCHER_PREFIX = "HOROVOD_"


def uses_env_file(p: Placement) -> bool:
    """horovodrun --gloo, Horovod elastic's launcher included (it needs gloo)."""
    return p.spec.kind is JobKind.HOROVOD and p.spec.horovod_launcher == "gloo"


def hidden_env(
    p: Placement, envs: Mapping[str, Mapping[str, str]], launcher: str
) -> dict[str, dict[str, str]]:
    """Per host (``envs``: each host's job environment), the values that travel in its
    file, those its environment keeps as given (a value the job cannot run without wins
    over them). Under horovodrun --gloo: the user's (``--env``, ``--env-file``) and the
    host's inventory ``env``, less horovodrun's own. Under mpirun: the host's inventory
    values that differ from the launcher's (``-x`` forwards the launcher's by name; a
    difference was in the rank wrapper's text, which is in every rank's argv)."""
    gloo = uses_env_file(p)
    base = envs.get(launcher, {})
    hidden: dict[str, dict[str, str]] = {}
    for h in p.hosts:
        given = {**h.host.env, **p.spec.env} if gloo else dict(h.host.env)
        own = envs.get(h.name, {})
        hidden[h.name] = {
            key: value
            for key, value in given.items()
            if own.get(key) == value
            and key not in LAUNCHER_READS
            and (base.get(key) != value if not gloo else not key.startswith(LAUNCHER_PREFIX))
        }
    return hidden if any(hidden.values()) else {}


def hidden_names(hidden: Mapping[str, Mapping[str, str]]) -> frozenset[str]:
    """Every name some host's file holds: none of them goes through horovodrun."""
    return frozenset(key for values in hidden.values() for key in values)


def env_file_name(host: str) -> str:
    return f"env.{host}.secret"


def env_file_path(job_dir: str, host: str) -> str:
    return f"{job_dir}/{env_file_name(host)}"


def env_file_uploads(p: Placement, hidden: Mapping[str, Mapping[str, str]]) -> tuple[Upload, ...]:
    """The file on every host of the job (each rank sources its own host's; a host with
    nothing of its own gets an empty one, since every rank waits for its file)."""
    if not hidden:
        return ()
    return tuple(
        Upload(
            host=h.name,
            path=env_file_path(h.job_dir, h.name),
            resource=SECRET_ENV_RESOURCE,
            data="".join(
                f"export {key}={shlex.quote(value)}\n"
                for key, value in hidden.get(h.name, {}).items()
            ),
        )
        for h in p.hosts
    )
