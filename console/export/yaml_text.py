"""Manifests as YAML text that reads the same to every YAML reader.

Kubernetes reads YAML 1.1 (``yes``, ``on``, ``0x1f`` are not strings there), Python's
ruamel.yaml 1.2: a string either version would read as something else is quoted, so
an argument like ``no`` or an environment value like ``1e3`` stays a string.
Keys keep their order (apiVersion, kind, metadata, spec).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.nodes import ScalarNode
from ruamel.yaml.representer import SafeRepresenter
from ruamel.yaml.resolver import VersionedResolver

_STR_TAG = "tag:yaml.org,2002:str"
_YAML_1_1 = VersionedResolver(version=(1, 1))


class _Representer(SafeRepresenter):
    """Quotes a string that YAML 1.1 would read as a bool, number or null (the 1.2
    emitter already quotes what 1.2 would); writes a shared value out in full each
    time (no ``&id001`` anchors: a manifest reads as the user would write it)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(representer: SafeRepresenter, data: str) -> Any:
    style = "'" if _YAML_1_1.resolve(ScalarNode, data, (True, False)) != _STR_TAG else None
    return representer.represent_scalar(_STR_TAG, data, style=style)


_Representer.add_representer(str, _represent_str)


def _yaml() -> YAML:
    yaml = YAML(typ="safe", pure=True)
    yaml.Representer = _Representer
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
    yaml.width = 4096  # long command lines stay on one line
    return yaml


def to_yaml(documents: Iterable[Mapping[str, Any]]) -> str:
    """One YAML stream (``---`` between documents)."""
    out = io.StringIO()
    _yaml().dump_all([dict(d) for d in documents], out)
    return out.getvalue()
