"""The console's tunables in one validated model, shared by the UI and the CLI.

A default the core owns (a library default used without settings too) is imported from
its module, never repeated here; a caller (the app, a command, a test) overrides a field
by name. A bad value is refused when the settings are built, with a message that names
the field, never later in a timer or a worker.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from console.errors import UsageError
from console.jobs.grace import DEFAULT_GRACE_S
from console.logs.buffer import DEFAULT_MAX_LINES_PER_RANK
from console.validation import first_problem


class Settings(BaseModel):
    # Frozen: screens and workers read one object; a change is a new Settings.
    model_config = ConfigDict(frozen=True, extra="forbid")

    monitor_interval_s: float | None = Field(
        default=1.0, gt=0, description="seconds between GPU samples; None starts no samplers"
    )
    close_timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="how long quitting waits for each close (jobs, samplers, hosts)",
    )
    refresh_s: float = Field(
        default=1.0,
        gt=0,
        description="how often relative times, durations and the steps table redraw",
    )
    history_refresh_s: float = Field(
        default=2.0,
        gt=0,
        description="how often the jobs screen looks for jobs other consoles started",
    )
    stop_grace_s: float = Field(
        default=DEFAULT_GRACE_S, ge=0, description="SIGTERM to SIGKILL, when a job is stopped"
    )
    log_lines_per_rank: int = Field(
        default=DEFAULT_MAX_LINES_PER_RANK,
        ge=100,
        description="log lines kept in memory per rank (the rest stay on disk)",
    )
    log_view_lines: int = Field(default=5_000, ge=100, description="log lines a logs view renders")
    log_follow_append: int = Field(
        default=1_000, ge=1, description="newest lines of one update a following view appends"
    )
    log_context_lines: int = Field(
        default=2, ge=0, le=50, description="lines shown around a match in matching-only mode"
    )
    # Most datacenter boards start to throttle in the high 80s.
    attention_hot_c: float = Field(
        default=85.0, gt=0, description="a GPU at or above this temperature (C) needs a look"
    )
    attention_memory_full: float = Field(
        default=0.95, gt=0, le=1, description="a GPU with this fraction of memory used needs a look"
    )
    attention_idle_percent: float = Field(
        default=5.0,
        ge=0,
        le=100,
        description="a GPU below this utilization while one of our ranks holds it needs a look",
    )


DEFAULT_SETTINGS = Settings()


def make_settings(**fields: Any) -> Settings:
    """Settings with these fields changed; a bad value raises :class:`UsageError`
    naming the field and saying what it must be."""
    try:
        return Settings(**fields)
    except ValidationError as exc:
        problem = first_problem(
            exc, known_keys=Settings.model_fields, unknown_key="no such setting"
        )
        name = ".".join(str(part) for part in problem.loc) or "settings"
        raise UsageError(name, problem.message) from None
