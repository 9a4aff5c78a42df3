"""hosts.yaml's text -> Python values: fast when the file is plain, bounded when it is not.

Two readers. ruamel's round-trip loader knows the line of every key, which each error
message names, but it is pure Python: 10,000 hosts took 4.7 s of CPU, nearly all of the
load. libyaml (PyYAML's C parser) reads the same file in about a tenth of that. So a file
is read by libyaml first, and its values are used only when the whole inventory is valid
and nothing in it could read differently in the two: every plain scalar is typed by
ruamel's own YAML 1.2 rules, and anything beyond str, null, bool, plain decimal ints and
plain floats (0o/0x/1_000 numbers, timestamps, merge keys, explicit tags, duplicate keys,
a %YAML directive) leaves the file to ruamel. A file with any problem is read again by
ruamel, so every error names its line as before.

Aliases share one value in both readers, but everything downstream copies: a 700-byte
"billion laughs" file made ``check`` reach 4.6 GB. A document whose aliases add more
than :data:`ALIAS_BASE` values plus :data:`ALIAS_FACTOR` per value written out is
refused before anything copies it, naming the alias that crossed the bound.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, ClassVar

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    NodeEvent,
)
from ruamel.yaml.nodes import ScalarNode as RuamelScalarNode
from ruamel.yaml.resolver import VersionedResolver

from console.errors import InventoryError
from console.inventory.yaml_syntax import syntax_error

try:  # PyYAML is a dependency; its C parser (libyaml) is what makes the fast reader fast
    import yaml as pyyaml

    _LIBYAML = bool(pyyaml.__with_libyaml__)
except ImportError:  # pragma: no cover - an install without PyYAML reads with ruamel only
    _LIBYAML = False

ALIAS_BASE = 10_000
ALIAS_FACTOR = 10
# hosts.yaml is 4 or 5 levels deep; 3,000 nested '[' kept ruamel's scanner busy for 30 s
# (each level rescans the open ones) and then raised RecursionError.
MAX_DEPTH = 100

_DIRECTIVE = re.compile(r"^%", re.MULTILINE)
_INT = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
_FLOAT = re.compile(r"-?[0-9]+\.[0-9]+\Z")
_BOOLS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False}
_BOOLS["FALSE"] = False
_RUAMEL_1_2 = VersionedResolver(version=(1, 2))
_TAG = "tag:yaml.org,2002:"
_FAST = "tag:distconsole,2026:"


class _NotPlain(Exception):
    """Something the fast reader leaves to ruamel."""


def read_yaml(text: str, path: str, *, fast: bool = True) -> tuple[Any, bool]:
    """``(document, lines_known)``: libyaml's plain values when ``fast`` and the file
    allows, else ruamel's round-trip values (which know their lines). Raises
    InventoryError for a syntax error or aliases past the bound."""
    if fast:
        doc = fast_document(text)
        if doc is not None:
            return doc, False
    return round_trip(text, path), True


def round_trip(text: str, path: str) -> Any:
    _check_depth(text, path)
    try:
        doc = YAML(typ="rt").load(text)
    except MarkedYAMLError as exc:
        raise syntax_error(exc, text, path) from None
    except YAMLError as exc:
        raise InventoryError(f"YAML error: {exc}", path=path) from None
    except RecursionError:
        raise InventoryError(
            "YAML nested too deeply (lists or mappings inside one another)", path=path
        ) from None
    check_aliases(doc, text, path)
    return doc


def check_aliases(doc: Any, text: str, path: str) -> None:
    """Refuse ``doc`` when its aliases expand past the bound (InventoryError naming the
    alias's line)."""
    written, added, _ = expansion(doc)
    budget = alias_budget(written)
    if added <= budget:
        return
    line, anchor, size = _crossing_alias(text, budget)
    what = f"alias *{anchor} here" if anchor else "an alias"
    adds = "refers to a value it is inside" if size is None else f"adds {size:,} values"
    raise InventoryError(
        f"YAML aliases expand this file past {written + budget:,} values ({what} {adds}; "
        f"the bound is {ALIAS_BASE:,} plus {ALIAS_FACTOR} per value written out): write the "
        "values out, or nest fewer aliases",
        path=path,
        line=line,
    )


def alias_budget(written: int) -> int:
    return ALIAS_BASE + ALIAS_FACTOR * written


def expansion(doc: Any) -> tuple[int, int | float, int]:
    """``(values written, values added by aliases, depth)`` of a loaded document,
    counting each scalar, list and mapping as one value and walking each shared list or
    mapping once. A list or mapping inside itself adds infinitely many."""
    sizes: dict[int, int] = {}
    open_ids: set[int] = set()
    added = 0
    total = 1
    depth = 0
    frames: list[tuple[Any, Iterator[Any], list[int]]] = []
    if _is_collection(doc):
        frames.append((doc, _children(doc), [1]))
        open_ids.add(id(doc))
    while frames:
        container, children, count = frames[-1]
        child = next(children, _END)
        if child is _END:
            frames.pop()
            open_ids.discard(id(container))
            sizes[id(container)] = count[0]
            if frames:
                frames[-1][2][0] += count[0]
            else:
                total = count[0]
            continue
        if not _is_collection(child):
            count[0] += 1
        elif id(child) in sizes:
            count[0] += sizes[id(child)]
            added += sizes[id(child)]
        elif id(child) in open_ids:
            return 0, float("inf"), depth
        else:
            open_ids.add(id(child))
            frames.append((child, _children(child), [1]))
            depth = max(depth, len(frames))
    return total - added, added, depth


_END = object()


def _is_collection(value: Any) -> bool:
    return isinstance(value, dict | list)


def _children(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield item
    else:
        yield from value


def _crossing_alias(text: str, budget: int) -> tuple[int | None, str | None, int | None]:
    """Where aliases cross ``budget``, read from the parser's events: ``(line, anchor,
    values it adds)`` (None for an alias inside its own anchor). The largest alias when
    none crosses by this count."""
    sizes: dict[str, int] = {}
    open_anchors: list[tuple[str | None, int]] = []
    total = added = 0
    largest: tuple[int | None, str | None, int | None] = (None, None, 0)
    try:
        for event in YAML(typ="rt").parse(text):
            if isinstance(event, AliasEvent):
                line = int(event.start_mark.line) + 1
                anchor = str(event.anchor)
                if any(anchor == name for name, _ in open_anchors):
                    return line, anchor, None
                size = sizes.get(anchor, 1)
                total += size
                added += size
                if added > budget:
                    return line, anchor, size
                if size > (largest[2] or 0):
                    largest = (line, anchor, size)
            elif isinstance(event, CollectionStartEvent):
                total += 1
                open_anchors.append((event.anchor, total - 1))
            elif isinstance(event, CollectionEndEvent):
                opened, start = open_anchors.pop()
                if opened:
                    sizes[str(opened)] = total - start
            elif isinstance(event, NodeEvent):  # a scalar
                total += 1
                if event.anchor:
                    sizes[str(event.anchor)] = 1
    except YAMLError:
        pass  # the file loaded, so the events did too; nothing more to say if not
    return largest


def fast_document(text: str) -> Any:
    """libyaml's values for ``text``; None when the file is not plain (see the module
    docstring), not valid YAML to libyaml, or its aliases pass the bound."""
    if not _LIBYAML or _DIRECTIVE.search(text):
        return None
    loader = _FastLoader(text)
    try:
        doc = loader.get_single_data()
        written, added, depth = expansion(doc)
    except (_NotPlain, pyyaml.YAMLError, RecursionError, TypeError):
        return None  # TypeError: a list or mapping used as a mapping key
    finally:
        loader.dispose()
    return doc if added <= alias_budget(written) and depth <= MAX_DEPTH else None


def _check_depth(text: str, path: str) -> None:
    """Refuse nesting past MAX_DEPTH, read by libyaml's events before ruamel reads it."""
    if not _LIBYAML:
        return
    depth = 0
    try:
        for event in pyyaml.parse(text, Loader=pyyaml.CSafeLoader):
            if isinstance(event, pyyaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    line = int(event.start_mark.line) + 1 if event.start_mark else 1
                    break
            elif isinstance(event, pyyaml.CollectionEndEvent):
                depth -= 1
        else:
            return
    except pyyaml.MarkedYAMLError as exc:
        if "nesting depth" not in str(exc.problem):
            return  # a syntax error: ruamel words it
        line = int(exc.problem_mark.line) + 1 if exc.problem_mark else 1
    except pyyaml.YAMLError:
        return
    raise InventoryError(
        f"YAML nested more than {MAX_DEPTH} levels deep (lists or mappings inside one another)",
        path=path,
        line=line,
    )


if _LIBYAML:

    class _FastLoader(pyyaml.CBaseLoader):
        """libyaml's parser; scalars typed by ruamel's YAML 1.2 rules, only the forms
        both libraries read alike constructed; the rest raise _NotPlain."""

        # Its own table, not a copy of the base's: a tag without a constructor of ours
        # (explicit !!int, !custom) goes to _other.
        yaml_constructors: ClassVar[dict[Any, Any]] = {}

        def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
            if kind is pyyaml.ScalarNode:
                if not implicit[0]:
                    return _FAST + "str"  # quoted or block: a string in both
                tag = str(_RUAMEL_1_2.resolve(RuamelScalarNode, value, (True, False)))
                return _FAST + tag.removeprefix(_TAG)
            return _FAST + ("seq" if kind is pyyaml.SequenceNode else "map")

    def _scalar(kind: str) -> Any:
        def construct(loader: Any, node: Any) -> Any:
            value = str(node.value)
            if kind == "str":
                return value
            if kind == "null":
                return None
            if kind == "bool":
                return _BOOLS[value]
            if kind == "int" and _INT.match(value):
                return int(value)
            if kind == "float" and _FLOAT.match(value):
                return float(value)
            raise _NotPlain(value)

        return construct

    def _seq(loader: Any, node: Any) -> Iterator[list[Any]]:
        items: list[Any] = []
        yield items
        items.extend(loader.construct_object(child) for child in node.value)

    def _map(loader: Any, node: Any) -> Iterator[dict[Any, Any]]:
        mapping: dict[Any, Any] = {}
        yield mapping
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node)
            if key in mapping:
                raise _NotPlain("duplicate key")  # ruamel's error names both lines
            mapping[key] = loader.construct_object(value_node)

    def _other(loader: Any, node: Any) -> Any:
        raise _NotPlain(node.tag)

    for _kind in ("str", "null", "bool", "int", "float"):
        _FastLoader.add_constructor(_FAST + _kind, _scalar(_kind))
    _FastLoader.add_constructor(_FAST + "seq", _seq)
    _FastLoader.add_constructor(_FAST + "map", _map)
    _FastLoader.add_constructor(None, _other)
