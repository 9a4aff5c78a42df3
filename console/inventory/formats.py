"""hosts.yaml -> :class:`console.inventory.Inventory`.

A file with a problem is read with ruamel.yaml's round-trip loader because it remembers
where every key sits, so a pydantic error on ``hosts[1].port`` can name the line of that
key; a valid plain file is read by libyaml first (yaml_reading.py). Every problem of
the file is reported in one pass, each at its own line (console/validation.py words them).
pssh host_files and Open MPI hostfiles are read by console/inventory/hostfile.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from console.errors import InventoryError
from console.inventory.hostfile import HostSpecError, parse_host_spec
from console.inventory.model import (
    Host,
    Inventory,
    SlurmSettings,
    build_host,
    host_problems,
    slurm_problems,
)
from console.inventory.yaml_reading import read_yaml, round_trip
from console.names import env_name_problem
from console.validation import did_you_mean

TOP_LEVEL_KEYS = ("defaults", "hosts", "slurm")
_LOCAL_PATH_KEYS = ("identity_file", "known_hosts")
_PER_HOST_ONLY = ("name", "address")


def load_yaml(text: str, path: str, base: Path, *, fast: bool = True) -> Inventory:
    """hosts.yaml -> Inventory; every problem of the file in one InventoryError.

    ``fast``: try libyaml's values first (console/inventory/yaml_reading.py)."""
    doc, lines_known = read_yaml(text, path, fast=fast)
    if not lines_known:
        try:
            return _inventory(doc, path, base)
        except InventoryError:
            doc = round_trip(text, path)  # the same problems again, each at its line
    return _inventory(doc, path, base)


def _inventory(doc: Any, path: str, base: Path) -> Inventory:
    if doc is None:
        raise InventoryError("empty file: no hosts listed", path=path, field="hosts")
    if not isinstance(doc, dict):
        raise InventoryError(
            "expected a mapping with a 'hosts' list (or a host_file with one host per line)",
            path=path,
            line=1,
        )
    found = _Problems(path)
    for key in doc:
        if key not in TOP_LEVEL_KEYS:
            guess = did_you_mean(str(key), TOP_LEVEL_KEYS)
            hint = f"did you mean {guess!r}?" if guess else f"known: {', '.join(TOP_LEVEL_KEYS)}"
            found.add(f"unknown top-level key; {hint}", _key_line(doc, key), str(key))
    defaults = doc.get("defaults")
    if defaults is None:
        defaults = {}
    elif not isinstance(defaults, dict):
        found.add("must be a mapping of host keys", _key_line(doc, "defaults"), "defaults")
        defaults = {}
    for key in _PER_HOST_ONLY:
        if key in defaults:
            found.add(
                "is per host and cannot be a default",
                _key_line(defaults, key),
                f"defaults.{key}",
            )
    entries = doc.get("hosts")
    if "hosts" not in doc:
        found.add("is required: list the hosts", 1, "hosts")
    elif not isinstance(entries, list):
        found.add("must be a list of hosts", _key_line(doc, "hosts"), "hosts")
    elif not entries:
        found.add("no hosts listed", _key_line(doc, "hosts"), "hosts")
    if not isinstance(entries, list) or not entries:
        found.raise_any()
        raise AssertionError("unreachable: a problem was recorded above")
    reader = _YamlHosts(path, base, defaults, doc, found)
    hosts = [reader.host(i, entry) for i, entry in enumerate(entries)]
    seen: dict[str, int] = {}
    for i, host in enumerate(hosts):
        if host is None:
            continue
        if host.name in seen:
            first = seen[host.name]
            entry = entries[i]
            key = "name" if isinstance(entry, dict) and "name" in entry else "address"
            line = (
                _key_line(entry, key, _item_line(entries, i))
                if isinstance(entry, dict)
                else (_item_line(entries, i))
            )
            found.add(
                f"duplicate host name {host.name!r} (also hosts[{first}], line "
                f"{_item_line(entries, first)})",
                line,
                f"hosts[{i}].name",
            )
            continue
        seen[host.name] = i
    names = [h.name for h in hosts if h is not None]
    _check_spares(defaults, entries, hosts, found)
    slurm = _slurm_section(doc, names, found)
    found.raise_any()
    return Inventory(
        path=path, hosts=tuple(h for h in hosts if h is not None), format="yaml", slurm=slurm
    )


def _check_spares(
    defaults: Any, entries: list[Any], hosts: list[Host | None], found: _Problems
) -> None:
    """``spare_hosts`` names hosts of this inventory; a problem names the key where it was
    written (``defaults.spare_hosts`` or ``hosts[i].spare_hosts``) and its line. A host
    with problems of its own still counts by the name it was given."""
    given = [h.name if h else _entry_name(e) for h, e in zip(hosts, entries, strict=True)]
    names = [n for n in given if n]
    for i, host in enumerate(hosts):
        if host is None:
            continue
        _check_rendezvous(defaults, entries, i, host, names, found)
        if not host.spare_hosts:
            continue
        entry = entries[i]
        own = isinstance(entry, dict) and "spare_hosts" in entry
        mapping, where = (entry, f"hosts[{i}]") if own else (defaults, "defaults")
        unknown = [n for n in host.spare_hosts if n not in names]
        if unknown:
            found.add(
                f"{', '.join(repr(n) for n in unknown)}: not a host of this inventory "
                f"(hosts: {', '.join(names)})",
                _key_line(mapping, "spare_hosts", _item_line(entries, i)),
                f"{where}.spare_hosts",
            )


def _check_rendezvous(
    defaults: Any, entries: list[Any], i: int, host: Host, names: list[str], found: _Problems
) -> None:
    """``rendezvous_host`` names another host of this inventory (a problem names the key
    where it was written and its line)."""
    wanted = host.rendezvous_host
    if wanted is None:
        return
    entry = entries[i]
    own = isinstance(entry, dict) and "rendezvous_host" in entry
    mapping, where = (entry, f"hosts[{i}]") if own else (defaults, "defaults")
    if wanted not in names:
        found.add(
            f"{wanted!r}: not a host of this inventory (hosts: {', '.join(names)})",
            _key_line(mapping, "rendezvous_host", _item_line(entries, i)),
            f"{where}.rendezvous_host",
        )


def _entry_name(entry: Any) -> str | None:
    """The name a ``hosts:`` entry gives (its name, else its address), unvalidated."""
    if isinstance(entry, dict):
        name = entry.get("name", entry.get("address"))
        return str(name) if name is not None else None
    if isinstance(entry, str):
        try:
            return parse_host_spec(entry)[1]
        except HostSpecError:
            return None
    return None


def _slurm_section(doc: Any, host_names: list[str], found: _Problems) -> SlurmSettings | None:
    """The ``slurm:`` section (None without one); its problems name ``slurm.KEY``."""
    section = doc.get("slurm")
    if section is None:
        return None
    if not isinstance(section, dict):
        found.add(
            "must be a mapping (login, partition, account, time, sbatch_options)",
            _key_line(doc, "slurm"),
            "slurm",
        )
        return None
    try:
        settings = SlurmSettings.model_validate(_plain(section))
    except ValidationError as exc:
        for problem in slurm_problems(exc):
            key = problem.key
            line = _key_line(section, key, _key_line(doc, "slurm"))
            value = section.get(key) if isinstance(key, str) else None
            if len(problem.loc) > 1 and isinstance(problem.loc[1], int) and isinstance(value, list):
                line = _item_line(value, problem.loc[1], line)
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in problem.loc)
            found.add(problem.message, line, f"slurm{where}")
        return None
    if settings.login not in host_names:
        found.add(
            f"{settings.login!r} is not a host of this inventory (hosts: {', '.join(host_names)})",
            _key_line(section, "login"),
            "slurm.login",
        )
        return None
    return settings


class _Problems:
    """Every problem found in one file, each once (a bad default shows up for each host)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.items: dict[str, InventoryError] = {}

    def add(self, message: str, line: int | None, field: str) -> None:
        error = InventoryError(message, path=self.path, line=line, field=field)
        self.items.setdefault(str(error), error)

    def raise_any(self) -> None:
        if self.items:
            ordered = sorted(self.items.values(), key=lambda e: (e.line or 0, e.field or ""))
            raise InventoryError.several(ordered)


class _YamlHosts:
    """Turns one `hosts:` entry plus `defaults:` into a Host, recording where each problem
    of it sits (a host with problems gives None)."""

    def __init__(self, path: str, base: Path, defaults: Any, doc: Any, found: _Problems) -> None:
        self.path = path
        self.base = base
        self.defaults = defaults
        self.doc = doc
        self.found = found
        self.default_env = self._env(defaults, "defaults")

    def host(self, index: int, entry: Any) -> Host | None:
        entries = self.doc["hosts"]
        where = f"hosts[{index}]"
        entry_line = _item_line(entries, index)
        if isinstance(entry, str):
            try:
                user, address, port = parse_host_spec(entry)
            except HostSpecError as exc:
                self.found.add(exc.message, entry_line, f"{where}.{exc.field}")
                return None
            entry = {"address": address}
            if user is not None:
                entry["user"] = user
            if port is not None:
                entry["port"] = port
        elif not isinstance(entry, dict):
            self.found.add(
                "must be a mapping (name, address, ...) or a '[user@]host[:port]' string",
                entry_line,
                where,
            )
            return None
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
            wrong = host_problems(exc)
            address_wrong = any(p.key == "address" for p in wrong)
            for problem in wrong:
                loc = problem.loc
                if name_from_address and loc and loc[0] == "name":
                    if address_wrong:
                        continue  # the same value, already reported as the address
                    loc = ("address", *loc[1:])
                elif loc == ("name",) and problem.kind == "missing" and "name" not in entry:
                    continue  # the name defaults to the address, whose own problem is shown
                line, field = self._locate(entry, entry_line, where, loc)
                self.found.add(problem.message, line, field)
            return None

    def _env(self, mapping: Any, where: str) -> dict[str, str]:
        if not isinstance(mapping, dict) or mapping.get("env") is None:
            return {}
        env = mapping["env"]
        if not isinstance(env, dict):
            self.found.add(
                "must be a mapping of NAME: value", _key_line(mapping, "env"), f"{where}.env"
            )
            return {}
        out: dict[str, str] = {}
        for key, value in env.items():
            line = _key_line(env, key, _key_line(mapping, "env"))
            field = f"{where}.env.{key}"
            problem = env_name_problem(key)
            if problem:
                self.found.add(problem, line, field)
            elif isinstance(value, bool) or not isinstance(value, str | int | float):
                shown = "null" if value is None else repr(_plain(value))
                self.found.add(
                    f"value must be a string or a number, got {shown} (quote it)", line, field
                )
            else:
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
