"""The checks of a job spec's own fields, one field at a time: program, arguments, host
lists, counts, ports, names, paths, environment.

A mixin of :class:`~console.jobs.spec.JobSpec` as those of ``spec_options.py`` are (the
fields are declared in ``JobSpec``, in the spec's order); the cross-field rules stay in
``JobSpec``'s model validators.
"""

from __future__ import annotations

from pydantic import field_validator

from console.jobs.spec_options import no_control_chars
from console.names import env_name_problem, interface_problem, job_name_problem

EXAMPLE_PREFIX = "example:"
EXAMPLES = ("ddp", "horovod", "mpi", "ps", "ray")
MAX_SLOTS = 1024
MAX_TASKS = 4096


class FieldChecks:
    """Each field's own check (pydantic collects these from a plain base class)."""

    @field_validator("exclude_slow")
    @classmethod
    def _exclude_slow(cls, value: float | None) -> float | None:
        if value is not None and not 0 < value <= 24 * 60:
            raise ValueError(f"must be minutes above 0 (at most a day), got {value}")
        return value

    @field_validator("slow_threshold")
    @classmethod
    def _slow_threshold(cls, value: float | None) -> float | None:
        if value is not None and not 1.05 <= value <= 10:
            raise ValueError(f"must be 1.05..10 (x the median rank's busy time), got {value}")
        return value

    @field_validator("program")
    @classmethod
    def _program(cls, value: str) -> str:
        value = no_control_chars(value.strip(), "the program")
        if not value:
            raise ValueError("a program is required (a script, an executable or example:NAME)")
        if value.startswith(EXAMPLE_PREFIX):
            which = value[len(EXAMPLE_PREFIX) :]
            if which not in EXAMPLES:
                raise ValueError(
                    f"unknown example {which!r}; choose one of "
                    + ", ".join(EXAMPLE_PREFIX + e for e in EXAMPLES)
                )
        return value

    @field_validator("args")
    @classmethod
    def _args(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arg in value:
            if "\x00" in arg:
                raise ValueError("arguments must not contain NUL characters")
        return value

    @field_validator("hosts", "tags", "spare_hosts")
    @classmethod
    def _names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        cleaned = tuple(v.strip() for v in value)
        for v in cleaned:
            if not v:
                raise ValueError("empty name in the list")
            no_control_chars(v, "a name")
        if len(set(cleaned)) != len(cleaned):
            raise ValueError("a name is listed twice")
        return cleaned

    @field_validator("rendezvous_host")
    @classmethod
    def _rendezvous_host(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return no_control_chars(value.strip(), "a host name")

    @field_validator("gpus_per_host")
    @classmethod
    def _gpus(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= MAX_SLOTS:
            raise ValueError(f"must be between 1 and {MAX_SLOTS}, got {value}")
        return value

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = no_control_chars(value.strip(), "the working directory")
        if not value:
            return None
        if ".." in value.split("/"):
            raise ValueError(f"must not contain '..', got {value!r}")
        return value  # a relative one is checked with --sync in _per_kind

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key, val in value.items():
            problem = env_name_problem(key)
            if problem:
                raise ValueError(problem)
            if "\x00" in val:
                raise ValueError(f"the value of {key} must not contain NUL characters")
        return value

    @field_validator("interface")
    @classmethod
    def _interface(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        problem = interface_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("master_port", "ray_dashboard_port")
    @classmethod
    def _port(cls, value: int | None) -> int | None:
        if value is not None and not 1024 <= value <= 65535:
            raise ValueError(f"must be between 1024 and 65535, got {value}")
        return value

    @field_validator("total_steps")
    @classmethod
    def _steps(cls, value: int | None) -> int | None:
        if value is not None and value <= 0:
            raise ValueError(f"must be a positive number of steps, got {value}")
        return value

    @field_validator("ps", "workers")
    @classmethod
    def _tasks(cls, value: int | None) -> int | None:
        if value is not None and not 0 <= value <= MAX_TASKS:
            raise ValueError(f"must be between 0 and {MAX_TASKS}, got {value}")
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        problem = job_name_problem(value)
        if problem:
            raise ValueError(problem)
        return value
