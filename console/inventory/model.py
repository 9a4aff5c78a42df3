"""hosts.yaml -> a validated, immutable :class:`Inventory`.

The models below are the contract the rest of the core codes against. ``load()``
accepts hosts.yaml, a pssh host_file (``user@host[:port]`` per line) and an Open MPI
hostfile (``host slots=N``); every error is an :class:`InventoryError` naming file,
line and field.

hosts.yaml rules worth knowing:

- ``defaults`` holds any host key except ``name``/``address``; a host's own value wins,
  except ``env``, which is merged (host variables override default ones).
- ``name`` is optional and defaults to ``address``; names must be unique.
- A host entry may also be a plain string ``[user@]host[:port]``.
- ``identity_file`` and ``known_hosts`` are local paths: ``~`` is expanded and relative
  paths are taken from the inventory file's directory. ``work_dir`` is remote and is
  left as written (``~`` expands on the host).
- ``interface`` is one interface name or a comma-separated list of them (it becomes
  ``NCCL_SOCKET_IFNAME`` / ``btl_tcp_if_include``).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from console.errors import InventoryError
from console.names import env_name_problem, host_name_problem, interfaces_problem
from console.validation import Problem, problems

LOCAL_ADDRESS = "local"

# No whitespace and no shell metacharacters: names and tags end up in file paths,
# log prefixes and command lines. \Z, not $: `$` also matches before a final newline, and
# "node1\n" (a YAML block scalar keeps it) would pass and only fail at connect.
_ADDRESS_RE = re.compile(r"^[A-Za-z0-9_.:%\[\]][A-Za-z0-9_.:%\[\]-]*\Z")
_USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\$?\Z")
_PROXY_RE = re.compile(r"^[A-Za-z0-9_.@:%,\[\]-]+\Z")
_PYTHON_RE = re.compile(r"^[A-Za-z0-9_./~+-]+\Z")
# Newlines, carriage returns, NUL and other C0 controls: a value with one is a slip of
# the YAML (a `|` block scalar, a pasted line end), never a host, user or path.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def _tag(value: str) -> str:
    return _named(host_name_problem(value, "a tag"), value)


# Validated per item so that an error names the tag's index (`tags[1]`).
Tag = Annotated[str, AfterValidator(_tag)]


class Host(BaseModel):
    """One machine of the cluster, with every default already applied."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    address: str
    port: int | None = None  # None: ~/.ssh/config or 22
    user: str | None = None  # None: ~/.ssh/config or the local user
    identity_file: str | None = None
    known_hosts: str | None = None  # None: OpenSSH's usual files
    insecure_host_keys: bool = False
    connect_timeout: float = 10.0
    keepalive_interval: float = 15.0
    work_dir: str = "~/distconsole"
    setup: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    interface: str | None = None
    gpus: int | Literal["auto"] = "auto"
    # Webhooks a job whose leader is this host notifies when it names none (--notify);
    # usually set once in ``defaults``. Secrets: errors never echo them.
    notify: tuple[str, ...] = ()
    # --max-restarts of a job whose leader is this host when it names none; usually in
    # ``defaults``.
    max_restarts: Annotated[int, Field(ge=0, le=100)] | None = None
    # --min-hosts of a ddp job whose leader is this host when it names none (elastic
    # membership); usually in ``defaults``.
    min_hosts: Annotated[int, Field(ge=1)] | None = None
    # --spare-hosts of a ddp job whose leader is this host when it names none (a list or
    # "a,b": other hosts of this inventory, checked in formats.py); usually in ``defaults``.
    spare_hosts: tuple[str, ...] = ()
    # --rendezvous-host of a ddp (or Horovod elastic) job whose leader is this host when
    # it names none: another host of this inventory (checked in formats.py) that trains
    # nothing; usually in ``defaults``.
    rendezvous_host: str | None = None
    # --slow-threshold of a job whose leader is this host when it names none (a rank, or a
    # ps worker, this many times slower than the median for 2 windows is slow; issue 32);
    # usually in ``defaults``.
    slow_threshold: float | None = None
    tags: tuple[Tag, ...] = ()
    proxy_jump: str | None = None
    python: str = "python3"
    # "simulated" is only ever set by the demo's own inventory; real hosts read NVML/nvidia-smi.
    gpu_source: Literal["auto", "simulated"] = "auto"

    @property
    def is_local(self) -> bool:
        return self.address == LOCAL_ADDRESS

    @field_validator(
        "address", "user", "identity_file", "known_hosts", "proxy_jump", "python", mode="before"
    )
    @classmethod
    def _one_line(cls, value: Any) -> Any:
        if isinstance(value, str):
            _refuse_controls(value)
        return value

    @field_validator("port", "connect_timeout", "keepalive_interval", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any) -> Any:
        # pydantic would read `true` as 1: a YAML slip that must not become port 1.
        if isinstance(value, bool):
            raise ValueError(f"must be a number, not {str(value).lower()}")
        return value

    @field_validator("slow_threshold", mode="before")
    @classmethod
    def _slow_threshold(cls, value: Any) -> Any:
        # The range of --slow-threshold (jobs/spec.py): 1.3 is the default.
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"must be a number 1.05..10 (x the median rank), got {value!r}")
        if not 1.05 <= value <= 10:
            raise ValueError(f"must be 1.05..10 (x the median rank), got {value}")
        return float(value)

    @field_validator("port")
    @classmethod
    def _port_range(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= 65535:
            raise ValueError(f"must be between 1 and 65535, got {value}")
        return value

    @field_validator("connect_timeout")
    @classmethod
    def _positive_timeout(cls, value: float) -> float:
        if value <= 0:
            raise ValueError(f"must be greater than 0 seconds, got {value:g}")
        return value

    @field_validator("keepalive_interval")
    @classmethod
    def _keepalive(cls, value: float) -> float:
        if value < 0:
            raise ValueError(f"must be 0 (off) or more seconds, got {value:g}")
        return value

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, value: Any) -> Any:
        if value == "auto" or (
            isinstance(value, int) and not isinstance(value, bool) and value >= 0
        ):
            return value
        raise ValueError(f"must be a whole number >= 0 or 'auto', got {value!r}")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _named(host_name_problem(value), value)

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        return _matching(value, _ADDRESS_RE, "a hostname, IP address, ssh alias or 'local'")

    @field_validator("user")
    @classmethod
    def _user(cls, value: str | None) -> str | None:
        return None if value is None else _matching(value, _USER_RE, "a user name")

    @field_validator("proxy_jump")
    @classmethod
    def _proxy_jump(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return _matching(value, _PROXY_RE, "[user@]host[:port], comma-separated for a chain")

    @field_validator("python")
    @classmethod
    def _python(cls, value: str) -> str:
        return _matching(value, _PYTHON_RE, "a command name or path such as python3")

    @field_validator("interface")
    @classmethod
    def _interface(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return _named(interfaces_problem(value), value)

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            _check_env_item(key, item)
        return value

    @field_validator("work_dir")
    @classmethod
    def _work_dir(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must be a non-empty path on one line")
        _refuse_controls(value)
        return value

    @field_validator("setup")
    @classmethod
    def _setup(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if "\n" in value.strip() or "\0" in value:
            raise ValueError("must be one line (join several commands with &&)")
        return value.strip() or None

    @field_validator("notify", mode="before")
    @classmethod
    def _notify(cls, value: object) -> object:
        urls = (value,) if isinstance(value, str) else value
        if not isinstance(urls, list | tuple):
            return value
        for url in urls:
            parts = urllib.parse.urlsplit(str(url).strip())
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(
                    f"{parts.scheme or '?'}://{parts.hostname or '?'}/...: a webhook URL starts "
                    "with https:// (or http://) and names a host"
                )
        return tuple(str(url).strip() for url in urls)

    @field_validator("spare_hosts", mode="before")
    @classmethod
    def _spare_hosts(cls, value: object) -> object:
        names = value.split(",") if isinstance(value, str) else value
        if not isinstance(names, list | tuple):
            raise ValueError("must be a list of host names (or one string 'a,b')")
        cleaned = []
        for name in names:
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"{name!r} is not a host name")
            cleaned.append(_named(host_name_problem(name.strip(), "a host name"), name.strip()))
        if len(set(cleaned)) != len(cleaned):
            raise ValueError("a host is listed twice")
        return tuple(cleaned)

    @field_validator("rendezvous_host", mode="before")
    @classmethod
    def _rendezvous_host(cls, value: object) -> object:
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{value!r} is not a host name")
        return _named(host_name_problem(value.strip(), "a host name"), value.strip())

    @field_validator("identity_file", "known_hosts")
    @classmethod
    def _local_path(cls, value: str | None) -> str | None:
        return None if value is None else os.path.expanduser(value)


def _refuse_controls(value: str) -> None:
    found = _CONTROL_RE.search(value)
    if found is None:
        return
    if value.rstrip("\r\n") != value and not _CONTROL_RE.search(value.rstrip("\r\n")):
        raise ValueError(
            f"{value!r} ends in a newline: write the value on the key's line "
            "(a '|' or '>' block keeps the line end)"
        )
    raise ValueError(f"{value!r} contains a control character ({found.group()!r}): one line only")


def _matching(value: str, pattern: re.Pattern[str], what: str) -> str:
    if not pattern.match(value):
        raise ValueError(f"{value!r} is not valid here: expected {what}")
    return value


def _named(problem: str | None, value: str) -> str:
    if problem:
        raise ValueError(problem)
    return value


def _check_env_item(key: str, value: str) -> None:
    _named(env_name_problem(key), key)
    if "\0" in value:
        raise ValueError(f"{key}: value contains a NUL character")


_SBATCH_WORD_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:,+=-]*\Z")
_SBATCH_OPTION_RE = re.compile(r"^--?[A-Za-z][A-Za-z0-9-]*(=[A-Za-z0-9._:,+=/@%-]+)?\Z")


class SlurmSettings(BaseModel):
    """hosts.yaml's ``slurm:`` section: where Slurm commands run and the job defaults.

    ``login`` is an inventory host where sbatch/squeue/scancel run over SSH (its
    ``setup`` line prepares their environment); its work_dir holds each job's script
    and output files, which the compute nodes must see (a shared filesystem, as on
    every Slurm cluster)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    login: str
    partition: str | None = None
    account: str | None = None
    time: str | None = None  # sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH, ...
    sbatch_options: tuple[str, ...] = ()  # extra `#SBATCH` lines, e.g. --qos=high

    @field_validator("partition", "account", "time", mode="before")
    @classmethod
    def _word(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # `time: 30` (minutes)
        if isinstance(value, str) and not _SBATCH_WORD_RE.match(value):
            raise ValueError(f"{value!r}: use letters, digits and . _ : , + = - (no spaces)")
        return value

    @field_validator("sbatch_options")
    @classmethod
    def _options(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for option in value:
            if not _SBATCH_OPTION_RE.match(option):
                raise ValueError(
                    f"{option!r} is not an sbatch option such as --qos=high or "
                    "--constraint=a100 (one option per item, no spaces)"
                )
        return value


class Inventory(BaseModel):
    """All hosts of one inventory file, in file order (the first host is the master)."""

    model_config = ConfigDict(frozen=True)

    path: str
    hosts: tuple[Host, ...]
    format: Literal["yaml", "pssh", "mpi-hostfile"] = "yaml"
    slurm: SlurmSettings | None = None  # hosts.yaml's `slurm:` section

    def get(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        known = ", ".join(h.name for h in self.hosts)
        raise InventoryError(f"no host named {name!r} (hosts: {known})", path=self.path)

    def select(
        self, names: Sequence[str] | None = None, tags: Iterable[str] | None = None
    ) -> tuple[Host, ...]:
        """Hosts by name (in the order given) and/or by tag; all hosts when neither is given."""
        chosen: list[Host] = [self.get(n) for n in names] if names else list(self.hosts)
        wanted = set(tags or ())
        if wanted:
            chosen = [h for h in chosen if wanted.intersection(h.tags)]
        return tuple(chosen)

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(sorted({t for h in self.hosts for t in h.tags}))


def build_host(fields: Mapping[str, Any]) -> Host:
    """Validate one host's merged fields (raises pydantic's ValidationError)."""
    return Host.model_validate(dict(fields))


def host_problems(error: ValidationError) -> list[Problem]:
    """Every problem of a host's ValidationError, worded for people."""
    return problems(error, known_keys=Host.model_fields)


def slurm_problems(error: ValidationError) -> list[Problem]:
    """Every problem of the ``slurm:`` section's ValidationError, worded for people."""
    return problems(error, known_keys=SlurmSettings.model_fields)
