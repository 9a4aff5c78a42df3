"""pydantic's validation errors -> messages a person can act on, in one place.

hosts.yaml, the job spec (form and CLI) and the settings all validate with pydantic; each
asks here for the wording, so "must be a whole number" reads the same everywhere and an
unknown key gets a did-you-mean instead of a second, misleading "is required".
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

# pydantic error type -> wording (a value_error's own text is used as is)
TYPE_MESSAGES: Mapping[str, str] = {
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "missing": "is required",
    "string_type": "must be text",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
}
# pydantic error type -> (wording, the ctx key holding the bound)
BOUND_MESSAGES: Mapping[str, tuple[str, str]] = {
    "greater_than": ("must be greater than", "gt"),
    "greater_than_equal": ("must be greater than or equal to", "ge"),
    "less_than": ("must be less than", "lt"),
    "less_than_equal": ("must be less than or equal to", "le"),
}


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the input: where (pydantic's ``loc``) and what."""

    loc: tuple[str | int, ...]
    message: str
    kind: str  # pydantic's error type: "missing", "extra_forbidden", "value_error", ...

    @property
    def key(self) -> str | int | None:
        return self.loc[0] if self.loc else None


def did_you_mean(word: str, known: Iterable[str]) -> str | None:
    """The known key ``word`` is most likely a typo of (``adress`` -> ``address``)."""
    matches = difflib.get_close_matches(word, list(known), n=1, cutoff=0.75)
    return matches[0] if matches else None


def problems(
    error: ValidationError,
    *,
    known_keys: Iterable[str] = (),
    unknown_key: str = "unknown key",
    overrides: Mapping[tuple[str, str], str] | None = None,
) -> list[Problem]:
    """Every problem of ``error``, worded for people, in pydantic's order.

    ``known_keys`` lists the valid keys, for did-you-mean on unknown ones; a required key
    that an unknown key most likely misspells is not reported as missing as well.
    ``overrides`` rewords by ``(field, error type)``.
    """
    known = sorted(known_keys)
    raw = error.errors()
    unknown = {str(e["loc"][0]) for e in raw if e["type"] == "extra_forbidden" and e["loc"]}
    meant = {did_you_mean(word, known) for word in unknown} - {None}
    out: list[Problem] = []
    for item in raw:
        loc = tuple(item["loc"])
        kind = str(item["type"])
        if kind == "missing" and len(loc) == 1 and loc[0] in meant:
            continue  # the unknown key's did-you-mean already says it
        out.append(Problem(loc, _message(item, kind, loc, known, unknown_key, overrides), kind))
    return out


def _message(
    item: Any,
    kind: str,
    loc: tuple[str | int, ...],
    known: list[str],
    unknown_key: str,
    overrides: Mapping[tuple[str, str], str] | None,
) -> str:
    field = str(loc[0]) if loc else ""
    if overrides and (field, kind) in overrides:
        message = overrides[(field, kind)]
    elif kind == "extra_forbidden":
        guess = did_you_mean(field, known)
        if guess:
            return f"{unknown_key}; did you mean {guess!r}?"
        return f"{unknown_key} (known keys: {', '.join(known)})" if known else unknown_key
    elif kind == "value_error":
        inner = (item.get("ctx") or {}).get("error")
        return str(inner) if inner is not None else str(item["msg"]).removeprefix("Value error, ")
    elif kind in BOUND_MESSAGES:
        words, key = BOUND_MESSAGES[kind]
        message = f"{words} {(item.get('ctx') or {}).get(key)}"
    else:
        message = TYPE_MESSAGES.get(kind, str(item.get("msg", "invalid value")))
    given = item.get("input")
    if kind != "missing" and isinstance(given, str | int | float) and not isinstance(given, bool):
        message = f"{message} (got {given!r})"
    return message


def first_problem(error: ValidationError, **options: Any) -> Problem:
    """The first problem only, for inputs that are fixed one field at a time (the form)."""
    found = problems(error, **options)
    return found[0] if found else Problem((), "invalid value", "value_error")
