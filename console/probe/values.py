"""Turning nvidia-smi's value strings into numbers, or into "not reported".

nvidia-smi prints placeholders where a board or driver has no figure; they differ by
format and driver version (``[N/A]`` in CSV, ``N/A`` in tables and XML, ``ERR!`` for a
failed fan sensor, ``[Requested functionality has been deprecated]`` since R535, ...).
All of them mean "not reported" (None): never 0, never an exception.
"""

from __future__ import annotations

import re

# The placeholders are one list with the hosts' (a supervisor's drain reads nvidia-smi too).
from console.hostprogs.sampler.health_rules import cell_text as text

# A number optionally followed by a unit nvidia-smi uses ("52 %", "627.40 W", "31 C", "16x").
_NUMBER = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*(%|w|mib|gib|kib|mhz|c|x|kb/s|mv|ms|us)?$", re.I)


def number(value: str | None) -> float | None:
    """A float from "52", "52 %", "627.40 W", "32362 MiB"; None when not reported/odd."""
    v = text(value)
    if v is None:
        return None
    m = _NUMBER.match(v)
    if not m:
        return None
    unit = (m.group(2) or "").lower()
    n = float(m.group(1))
    if unit == "gib":
        return n * 1024
    if unit == "kib":
        return n / 1024
    return n


def integer(value: str | None) -> int | None:
    n = number(value)
    return None if n is None else int(n)
