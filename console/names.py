"""The one owner of every name rule: what a valid name of each kind looks like.

Inventory, job spec, transport, planners and the CLI all check names; each asks here, so
a rule cannot drift between the form, hosts.yaml and the command line. Every checker
returns a message fragment (``None`` when the value is fine) rather than raising, so each
caller raises its own error type naming its own field.
"""

from __future__ import annotations

import re

# Process environment variable that ties a process (and its children) to its job: the
# sampler reads it from /proc to put a job and rank on each GPU process, stop finds
# leftovers by it. Host programs that cannot import this module receive it in argv.
JOB_ID_VAR = "DISTCONSOLE_JOB_ID"

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Linux IFNAMSIZ is 16 with the NUL; ':' is allowed for legacy alias labels (eth0:1),
# which NCCL and Open MPI accept as names. No '/', whitespace or shell characters.
INTERFACE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,15}\Z")
JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}\Z")
JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
# Host names and tags end up in file paths, log prefixes and command lines.
HOST_NAME = re.compile(r"[A-Za-z0-9_.:@%+\[\]][A-Za-z0-9_.:@%+\[\]-]*\Z")

_UNSAFE_STEM = re.compile(r"[^A-Za-z0-9._-]+")


def env_name_problem(name: object) -> str | None:
    if isinstance(name, str) and ENV_NAME.match(name):
        return None
    return (
        f"{name!r} is not a valid environment variable name "
        "(letters, digits, '_'; not starting with a digit)"
    )


def interface_problem(name: str) -> str | None:
    if INTERFACE_NAME.match(name):
        return None
    return (
        f"{name!r} is not a network interface name (up to 15 letters, digits, "
        "'_', '.', ':', '-', e.g. eth0, ib0)"
    )


def interfaces_problem(value: str) -> str | None:
    """Several interfaces joined with ',' (NCCL_SOCKET_IFNAME and Open MPI accept lists)."""
    for item in value.split(","):
        problem = interface_problem(item)
        if problem:
            return problem + "; several are joined with ','"
    return None


def valid_job_id(job_id: str) -> bool:
    return bool(JOB_ID.match(job_id)) and ".." not in job_id


def job_id_problem(job_id: str) -> str | None:
    return None if valid_job_id(job_id) else f"{job_id!r} is not a job id"


def job_name_problem(name: str) -> str | None:
    if JOB_NAME.match(name):
        return None
    return f"{name!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"


def host_name_problem(name: str, what: str = "a name") -> str | None:
    if HOST_NAME.match(name):
        return None
    return f"{name!r} is not valid here: expected {what} without spaces or shell characters"


def path_stem(text: str, limit: int = 48) -> str:
    """``text`` made safe for a file or job-id stem (``job`` when nothing is left)."""
    return _UNSAFE_STEM.sub("-", text).strip("-.")[:limit] or "job"
