"""The three inventory file formats -> :class:`console.inventory.Inventory`.

hosts.yaml is read with ruamel.yaml's round-trip loader because it remembers where
every key sits, so a pydantic error on ``hosts[1].port`` can name the line of that key.
pssh host_files and Open MPI hostfiles are one host per line and share one grammar
here: ``[user@]host[:port] [slots=N] [max_slots=M]``.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from console.errors import InventoryError
from console.inventory import Host, Inventory, build_host, describe_validation_error
from console.names import env_name_problem

TOP_LEVEL_KEYS = ("defaults", "hosts")
_LOCAL_PATH_KEYS = ("identity_file", "known_hosts")
_PER_HOST_ONLY = ("name", "address")

# A line that can only be YAML: a `key:` mapping entry, a `- ` list item, a flow mapping.
_YAML_LINE = re.compile(r"^\s*(-(\s|$)|\{|---|[^\s#]*[^\s#:]:(\s|$))")
_SPEC = re.compile(r"^(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]\s]+\]|[^:@\s]+)(?::(?P<port>[^:]*))?$")
_HOSTFILE_OPTIONS = {"slots": "slots", "max_slots": "max_slots", "max-slots": "max_slots"}


# ---------------------------------------------------------------------------------------
# hosts.yaml


def load_yaml(text: str, path: str, base: Path) -> Inventory:
    try:
        doc = YAML(typ="rt").load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = None if mark is None else mark.line + 1
        problem = exc.problem or exc.context or "invalid YAML"
        raise InventoryError(f"YAML syntax error: {problem}", path=path, line=line) from None
    except YAMLError as exc:
        raise InventoryError(f"YAML error: {exc}", path=path) from None
    if doc is None:
        raise InventoryError("empty file: no hosts listed", path=path, field="hosts")
    if not isinstance(doc, dict):
        raise InventoryError(
            "expected a mapping with a 'hosts' list (or a host_file with one host per line)",
            path=path,
            line=1,
        )
    for key in doc:
        if key not in TOP_LEVEL_KEYS:
            raise InventoryError(
                f"unknown top-level key (known: {', '.join(TOP_LEVEL_KEYS)})",
                path=path,
                line=_key_line(doc, key),
                field=str(key),
            )
    defaults = doc.get("defaults")
    if defaults is None:
        defaults = {}
    elif not isinstance(defaults, dict):
        raise InventoryError(
            "must be a mapping of host keys",
            path=path,
            line=_key_line(doc, "defaults"),
            field="defaults",
        )
    for key in _PER_HOST_ONLY:
        if key in defaults:
            raise InventoryError(
                "is per host and cannot be a default",
                path=path,
                line=_key_line(defaults, key),
                field=f"defaults.{key}",
            )
    if "hosts" not in doc:
        raise InventoryError("is required: list the hosts", path=path, line=1, field="hosts")
    entries = doc["hosts"]
    if not isinstance(entries, list):
        raise InventoryError(
            "must be a list of hosts", path=path, line=_key_line(doc, "hosts"), field="hosts"
        )
    if not entries:
        raise InventoryError(
            "no hosts listed", path=path, line=_key_line(doc, "hosts"), field="hosts"
        )
    reader = _YamlHosts(path, base, defaults, doc)
    hosts = [reader.host(i, entry) for i, entry in enumerate(entries)]
    seen: dict[str, int] = {}
    for i, host in enumerate(hosts):
        if host.name in seen:
            first = seen[host.name]
            entry = entries[i]
            key = "name" if isinstance(entry, dict) and "name" in entry else "address"
            line = (
                _key_line(entry, key, _item_line(entries, i))
                if isinstance(entry, dict)
                else (_item_line(entries, i))
            )
            raise InventoryError(
                f"duplicate host name {host.name!r} (also hosts[{first}], line "
                f"{_item_line(entries, first)})",
                path=path,
                line=line,
                field=f"hosts[{i}].name",
            )
        seen[host.name] = i
    return Inventory(path=path, hosts=tuple(hosts), format="yaml")


class _YamlHosts:
    """Turns one `hosts:` entry plus `defaults:` into a Host, locating any error."""

    def __init__(self, path: str, base: Path, defaults: Any, doc: Any) -> None:
        self.path = path
        self.base = base
        self.defaults = defaults
        self.doc = doc
        self.default_env = self._env(defaults, "defaults")

    def fail(self, message: str, line: int | None, field: str) -> InventoryError:
        return InventoryError(message, path=self.path, line=line, field=field)

    def host(self, index: int, entry: Any) -> Host:
        entries = self.doc["hosts"]
        where = f"hosts[{index}]"
        entry_line = _item_line(entries, index)
        if isinstance(entry, str):
            try:
                user, address, port = parse_host_spec(entry)
            except _SpecError as exc:
                raise self.fail(exc.message, entry_line, f"{where}.{exc.field}") from None
            entry = {"address": address}
            if user is not None:
                entry["user"] = user
            if port is not None:
                entry["port"] = port
        elif not isinstance(entry, dict):
            raise self.fail(
                "must be a mapping (name, address, ...) or a '[user@]host[:port]' string",
                entry_line,
                where,
            )
        merged: dict[str, Any] = {k: _plain(v) for k, v in self.defaults.items() if k != "env"}
        merged.update({k: _plain(v) for k, v in entry.items() if k != "env"})
        merged["env"] = {**self.default_env, **self._env(entry, where)}
        name_from_address = "name" not in merged and isinstance(merged.get("address"), str)
        if name_from_address:
            merged["name"] = merged["address"]
        for key in _LOCAL_PATH_KEYS:
            value = merged.get(key)
            if isinstance(value, str) and value:
                merged[key] = _local_path(value, self.base)
        try:
            return build_host(merged)
        except ValidationError as exc:
            loc, message = describe_validation_error(exc)
            if name_from_address and loc and loc[0] == "name":
                loc = ("address", *loc[1:])
            line, field = self._locate(entry, entry_line, where, loc)
            raise self.fail(message, line, field) from None

    def _env(self, mapping: Any, where: str) -> dict[str, str]:
        if not isinstance(mapping, dict) or mapping.get("env") is None:
            return {}
        env = mapping["env"]
        if not isinstance(env, dict):
            raise self.fail(
                "must be a mapping of NAME: value", _key_line(mapping, "env"), f"{where}.env"
            )
        out: dict[str, str] = {}
        for key, value in env.items():
            line = _key_line(env, key, _key_line(mapping, "env"))
            field = f"{where}.env.{key}"
            problem = env_name_problem(key)
            if problem:
                raise self.fail(problem, line, field)
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                shown = "null" if value is None else repr(_plain(value))
                raise self.fail(
                    f"value must be a string or a number, got {shown} (quote it)", line, field
                )
            out[key] = str(value)
        return out

    def _locate(
        self, entry: Any, entry_line: int | None, where: str, loc: tuple[Any, ...]
    ) -> tuple[int | None, str]:
        if not loc:
            return entry_line, where
        key, rest = loc[0], loc[1:]
        suffix = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in rest)
        for mapping, prefix in ((entry, where), (self.defaults, "defaults")):
            if isinstance(mapping, dict) and key in mapping:
                line = _key_line(mapping, key, entry_line)
                value = mapping[key]
                if rest and isinstance(rest[0], int) and isinstance(value, list):
                    line = _item_line(value, rest[0], line)
                return line, f"{prefix}.{key}{suffix}"
        return entry_line, f"{where}.{key}{suffix}"


def _plain(value: Any) -> Any:
    """ruamel's round-trip containers and scalar subclasses -> plain Python values."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value


def _local_path(value: str, base: Path) -> str:
    expanded = os.path.expanduser(value)
    return expanded if os.path.isabs(expanded) else str(base / expanded)


def _key_line(mapping: Any, key: Any, fallback: int | None = None) -> int | None:
    try:
        return int(mapping.lc.key(key)[0]) + 1
    except (AttributeError, KeyError, TypeError, IndexError):
        # keys that came through a YAML merge (`<<: *x`) have no position of their own
        return fallback


def _item_line(seq: Any, index: int, fallback: int | None = None) -> int | None:
    try:
        return int(seq.lc.item(index)[0]) + 1
    except (AttributeError, KeyError, TypeError, IndexError):
        return fallback


# ---------------------------------------------------------------------------------------
# pssh host_file / Open MPI hostfile


class _SpecError(Exception):
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
        raise _SpecError("host", f"{spec!r} is not [user@]host[:port]")
    host = match["host"].strip("[]")
    port_text = match["port"]
    port: int | None = None
    if port_text is not None:
        if not port_text.isdigit():
            raise _SpecError("port", f"{port_text!r} is not a port number")
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
        except _SpecError as exc:
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
            loc, message = describe_validation_error(exc)
            key = str(loc[0]) if loc else "host"
            raise InventoryError(
                message, path=path, line=lineno, field=names.get(key, key)
            ) from None
    return tuple(hosts)
