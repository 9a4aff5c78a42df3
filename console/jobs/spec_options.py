"""The checks of a job spec's optional features: network preset, --sync, Ray, hang,
restarts.

Mixins of :class:`~console.jobs.spec.JobSpec` (pydantic collects field validators from
plain base classes): each family's fields are declared in ``JobSpec`` (their order is
the spec's), their checks here. The cross-field rules (a ray field without ``--kind
ray``, ``stop_on_hang`` without a timeout) stay in ``JobSpec``'s model validators.
"""

from __future__ import annotations

import math

from pydantic import field_validator

from console.jobs.sync.tree import parse_size

# Hang detection: well under NCCL's 10-minute watchdog, long enough for a slow first step.
DEFAULT_HANG_TIMEOUT = 300.0
HANG_TIMEOUT_OFF = ("0", "off", "none", "no")
# Ray refuses a smaller object store (ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES).
RAY_MIN_OBJECT_STORE = 75 * 1024 * 1024
RAY_FIELDS = ("ray_object_store", "ray_dashboard_host", "ray_dashboard_port")


class FieldProblem(ValueError):
    """Raised inside a model validator to say which field a cross-field problem is about."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(message)


def no_control_chars(value: str, what: str) -> str:
    if "\x00" in value or "\n" in value or "\r" in value:
        raise ValueError(f"{what} must not contain NUL or line breaks")
    return value


class NetChecks:
    """``ib_hca`` (``--ib-hca``, for the network presets of console/jobs/plan/netpresets.py)."""

    @field_validator("ib_hca")
    @classmethod
    def _ib_hca(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if not all(c.isalnum() or c in "_-.:,^=" for c in value):
            raise ValueError(f"{value!r} is not an NCCL_IB_HCA list (e.g. mlx5_0,mlx5_1:1)")
        return value


class SyncChecks:
    """``sync``, ``sync_max_size``, ``sync_max_file`` (``--sync``; sizes as 10M, 2G)."""

    @field_validator("sync")
    @classmethod
    def _sync(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return no_control_chars(value.strip(), "the sync directory")

    @field_validator("sync_max_size", "sync_max_file", mode="before")
    @classmethod
    def _sync_size(cls, value: object) -> object:
        if isinstance(value, str) and value.strip():
            return parse_size(value)
        return value

    @field_validator("sync_max_size", "sync_max_file")
    @classmethod
    def _sync_size_positive(cls, value: int | None) -> int | None:
        if value is not None and value <= 0:
            raise ValueError(f"must be a positive size, got {value}")
        return value


class RayChecks:
    """``ray_object_store`` (a size), ``ray_dashboard_host`` (``--kind ray``)."""

    @field_validator("ray_object_store", mode="before")
    @classmethod
    def _ray_store_size(cls, value: object) -> object:
        if isinstance(value, str) and value.strip():
            return parse_size(value)
        return value

    @field_validator("ray_object_store")
    @classmethod
    def _ray_store(cls, value: int | None) -> int | None:
        if value is not None and value < RAY_MIN_OBJECT_STORE:
            raise ValueError(
                f"Ray needs an object store of at least 79M (75 MiB), got {value} bytes"
            )
        return value

    @field_validator("ray_dashboard_host")
    @classmethod
    def _ray_dashboard_host(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if not all(c.isalnum() or c in ".-:_" for c in value):
            raise ValueError(f"{value!r} is not an address to listen on (e.g. 127.0.0.1, 0.0.0.0)")
        return value


class HangChecks:
    """``hang_timeout`` (seconds; 0 or off: no hang check)."""

    @field_validator("hang_timeout", mode="before")
    @classmethod
    def _hang_off(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() in HANG_TIMEOUT_OFF:
            return None
        return value

    @field_validator("hang_timeout")
    @classmethod
    def _hang_timeout(cls, value: float | None) -> float | None:
        if value is None or value == 0:
            return None
        if not math.isfinite(value) or value < 0:
            raise ValueError(
                f"must be a number of seconds above 0 (0 or off: no hang check), got {value}"
            )
        return value


MAX_RESTARTS_LIMIT = 100  # more is a loop, not recovery


class RestartChecks:
    """``max_restarts`` (``--max-restarts``), ``checkpoint_dir`` (``--checkpoint-dir``) and
    ``min_hosts`` (``--min-hosts``; its upper bound, the job's hosts, is the plan's check)."""

    @field_validator("max_restarts")
    @classmethod
    def _max_restarts(cls, value: int | None) -> int | None:
        if value is not None and not 0 <= value <= MAX_RESTARTS_LIMIT:
            raise ValueError(f"must be 0..{MAX_RESTARTS_LIMIT} restarts, got {value}")
        return value

    @field_validator("min_hosts")
    @classmethod
    def _min_hosts(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError(f"must be at least 1 host, got {value}")
        return value

    @field_validator("checkpoint_dir")
    @classmethod
    def _checkpoint_dir(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = no_control_chars(value.strip(), "a checkpoint directory")
        if not (value.startswith("/") or value == "~" or value.startswith("~/")):
            raise ValueError(
                f"must be an absolute path on the hosts (/... or ~/...), got {value!r}"
            )
        return value.rstrip("/") or "/"
