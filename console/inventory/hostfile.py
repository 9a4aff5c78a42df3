"""pssh host_files and Open MPI hostfiles -> :class:`console.inventory.Inventory`.

Both are one host per line and share one grammar here:
``[user@]host[:port] [slots=N] [max_slots=M]``; ``#`` starts a comment anywhere.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from pydantic import ValidationError

from console.errors import InventoryError
from console.inventory.model import Host, Inventory, build_host, host_problems

# A line that can only be YAML: a `key:` mapping entry, a `- ` list item, a flow mapping.
_YAML_LINE = re.compile(r"^\s*(-(\s|$)|\{|---|[^\s#]*[^\s#:]:(\s|$))")
_SPEC = re.compile(r"^(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]\s]+\]|[^:@\s]+)(?::(?P<port>[^:]*))?$")
_HOSTFILE_OPTIONS = {"slots": "slots", "max_slots": "max_slots", "max-slots": "max_slots"}


class HostSpecError(Exception):
    """A ``[user@]host[:port]`` that does not parse; ``field`` is host or port."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def parse_host_spec(spec: str) -> tuple[str | None, str, int | None]:
    """``[user@]host[:port]`` (IPv6 as ``[addr]:port`` or bare) -> (user, host, port)."""
    if spec.count(":") > 1 and not spec.startswith("[") and "]" not in spec:
        user, _, host = spec.rpartition("@")
        return (user or None), host, None
    match = _SPEC.match(spec)
    if not match:
        raise HostSpecError("host", f"{spec!r} is not [user@]host[:port]")
    host = match["host"].strip("[]")
    port_text = match["port"]
    port: int | None = None
    if port_text is not None:
        if not port_text.isdigit():
            raise HostSpecError("port", f"{port_text!r} is not a port number")
        port = int(port_text)
    return match["user"], host, port


def looks_like_hostfile(text: str) -> bool:
    """True when no line can only be YAML (pssh and MPI lines never hold `key: `)."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return bool(lines) and not any(_YAML_LINE.match(ln) for ln in lines)


def load_hostfile(text: str, path: str) -> Inventory:
    rows: list[tuple[int, dict[str, Any]]] = []
    mpi = False
    for lineno, raw in enumerate(text.splitlines(), start=1):
        # `#` starts a comment anywhere: it cannot appear in a host, user or number.
        content = raw.split("#", 1)[0].strip()
        if not content:
            continue
        spec, *options = content.split()
        try:
            user, address, port = parse_host_spec(spec)
        except HostSpecError as exc:
            raise InventoryError(exc.message, path=path, line=lineno, field=exc.field) from None
        fields: dict[str, Any] = {"address": address, "user": user, "port": port}
        found: dict[str, int] = {}
        for option in options:
            key, sep, value = option.partition("=")
            if not sep:
                raise InventoryError(
                    f"unexpected {option!r}: expected key=value such as slots=4",
                    path=path,
                    line=lineno,
                    field=option,
                )
            if key not in _HOSTFILE_OPTIONS:
                raise InventoryError(
                    "unknown option (known: slots, max_slots)",
                    path=path,
                    line=lineno,
                    field=key,
                )
            if not value.isdigit():
                raise InventoryError(
                    f"must be a whole number >= 0, got {value!r}",
                    path=path,
                    line=lineno,
                    field=key,
                )
            found[_HOSTFILE_OPTIONS[key]] = int(value)
            mpi = True
        if "slots" in found and "max_slots" in found and found["max_slots"] < found["slots"]:
            raise InventoryError(
                f"max_slots ({found['max_slots']}) is less than slots ({found['slots']})",
                path=path,
                line=lineno,
                field="max_slots",
            )
        if "slots" in found:
            fields["gpus"] = found["slots"]
        rows.append((lineno, fields))
    if not rows:
        raise InventoryError("no hosts listed", path=path, field="hosts")
    return Inventory(
        path=path, hosts=_hostfile_hosts(rows, path), format=("mpi-hostfile" if mpi else "pssh")
    )


def _hostfile_hosts(rows: list[tuple[int, dict[str, Any]]], path: str) -> tuple[Host, ...]:
    per_address = Counter(fields["address"] for _, fields in rows)
    hosts: list[Host] = []
    first_line: dict[str, int] = {}
    names = {"address": "host", "name": "host", "gpus": "slots"}
    for lineno, fields in rows:
        address = fields["address"]
        # Several sshd on one machine (different ports) are several hosts.
        name = address if per_address[address] == 1 else f"{address}:{fields['port'] or 22}"
        if name in first_line:
            raise InventoryError(
                f"host {name!r} is listed twice (first on line {first_line[name]})",
                path=path,
                line=lineno,
                field="host",
            )
        first_line[name] = lineno
        try:
            hosts.append(build_host({"name": name, **fields}))
        except ValidationError as exc:
            problem = host_problems(exc)[0]
            key = str(problem.key) if problem.loc else "host"
            raise InventoryError(
                problem.message, path=path, line=lineno, field=names.get(key, key)
            ) from None
    return tuple(hosts)
