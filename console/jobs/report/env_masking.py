"""The job's ``--env`` / ``--env-file`` values, masked in what a report bundle copies.

A bundle is made to be handed on (a ticket, a colleague), and the job's environment is
in several of its files: every process's wrapper (``NAME.sh``: ``export NAME=VALUE``),
each host's ``job.json`` (the spec's ``env``, the plan's per-process ``env`` and, under
horovodrun --gloo, the ``env.HOST.secret`` uploads' text: ``jobs/plan/mpi_secrets.py``) and
``plan.json``. Every value the user gave is taken as a secret (a name alone says
nothing of what its value is): the names stay, the values read ``(masked)``.

The names come from the hosts' ``job.json`` (its ``spec.env``). When no host's came
back, every value of the plan's environments is masked: nothing tells which are the
user's. Logs are copied as written: what a program prints is its own.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from console.jobs.models import JobPlan
from console.jobs.plan.mpi_secrets import SECRET_ENV_RESOURCE

MASKED = "(masked)"
RAW_MIN = 8  # a value this long is masked wherever it stands in our own files
_AFTER_WORD = r"(?=$|[\s;&|)\"])"  # where a bare shell word ends


@dataclass(frozen=True)
class EnvSecrets:
    """The user's env names and every value they had in the job."""

    names: frozenset[str]
    values: frozenset[tuple[str, str]]  # (name, value)
    from_spec: bool = True  # False: every name of the plan (no job.json told them)

    def __bool__(self) -> bool:
        return bool(self.names)


def spec_env(job_document: Any) -> dict[str, str] | None:
    """``job.json``'s ``spec.env`` (None: no spec there, a job.json from elsewhere)."""
    spec = job_document.get("spec") if isinstance(job_document, dict) else None
    env = spec.get("env") if isinstance(spec, dict) else None
    if not isinstance(env, dict):
        return None
    return {str(k): str(v) for k, v in env.items()}


def env_secrets(plan: JobPlan, job_documents: Iterable[Any]) -> EnvSecrets:
    """What to mask: the ``spec.env`` of every host's ``job.json``; none came back:
    every name of the plan's environments (see the module doc)."""
    known = [env for doc in job_documents if (env := spec_env(doc)) is not None]
    values = {pair for env in known for pair in env.items()}
    names = {name for env in known for name in env}
    if not known:
        names = {name for launch in plan.launches for name in launch.env}
    values |= {(n, v) for launch in plan.launches for n, v in launch.env.items() if n in names}
    return EnvSecrets(frozenset(names), frozenset(values), from_spec=bool(known))


def _masked_text(text: str, secrets: EnvSecrets) -> str:
    """``NAME=VALUE`` as a shell reads it (``export NAME='v a l'``), and a long value
    anywhere, with the value masked."""
    for name, value in secrets.values:
        if not value:
            continue
        shown = f"{name}={shlex.quote(MASKED)}"
        for form in {shlex.quote(value), value}:
            pattern = r"(?<![\w])" + re.escape(f"{name}={form}") + _AFTER_WORD
            text = re.sub(pattern, shown.replace("\\", r"\\"), text)
        if secrets.from_spec and len(value) >= RAW_MIN:  # not every path of the plan
            text = text.replace(value, MASKED)
    return text


def masked_env_document(doc: Any, secrets: EnvSecrets) -> Any:
    """A copy of a JSON document (``job.json``, ``plan.json``) with the user's values
    masked: in every ``env`` mapping, the ``env.HOST.secret`` uploads' text, any string."""
    if isinstance(doc, list):
        return [masked_env_document(item, secrets) for item in doc]
    if isinstance(doc, str):
        return _masked_text(doc, secrets)
    if not isinstance(doc, dict):
        return doc
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if key == "env" and isinstance(value, dict):
            out[key] = {k: MASKED if k in secrets.names else v for k, v in value.items()}
        else:
            out[key] = masked_env_document(value, secrets)
    if _is_env_upload(doc) and out.get("data") is not None:
        out["data"] = MASKED
    return out


def _is_env_upload(doc: Mapping[str, Any]) -> bool:
    path = doc.get("path")
    return doc.get("resource") == SECRET_ENV_RESOURCE or (
        isinstance(path, str)
        and PurePosixPath(path).name.startswith("env.")
        and PurePosixPath(path).name.endswith(".secret")
    )


SCRIPTS = (".sh", ".sbatch")  # wrappers, a Slurm job's batch script (export NAME=...)


def masked_env_bytes(name: str, data: bytes, secrets: EnvSecrets) -> bytes:
    """A script of the job (:data:`SCRIPTS`) with the user's values masked; other files
    as they are."""
    if not secrets or not name.endswith(SCRIPTS):
        return data
    return _masked_text(data.decode("utf-8", "replace"), secrets).encode()
