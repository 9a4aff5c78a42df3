"""Notifications of a job (issue 25 item 5): where they go and when, from the spec to the
plan, shown masked.

``--notify URL`` (repeatable; the leader host's ``notify`` from the inventory when the
job names none), ``--notify-command CMD`` (run on the leader host), ``--notify-on``
(events, default failed, hung, succeeded). The leader's supervisor sends them
(``hostprogs/supervisor/notify.py``, whose event names and masking are used here too, so
both ends read one definition). Webhook URLs are secrets: every place that shows a plan
shows :func:`masked` ones.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Sequence
from typing import Any

from pydantic import field_validator

from console.hostprogs.supervisor.notify import NOTIFY_DEFAULT_ON, NOTIFY_EVENTS, masked_url
from console.inventory import Host
from console.jobs.models import JobPlan, Notify
from console.jobs.spec_options import no_control_chars

__all__ = [
    "NOTIFY_DEFAULT_ON",
    "NOTIFY_EVENTS",
    "masked",
    "masked_bytes",
    "masked_document",
    "masked_url",
    "plan_notify",
]


def check_url(value: str) -> str:
    """A webhook URL: http(s), with a host; the message never echoes it (a secret)."""
    value = no_control_chars(value.strip(), "a webhook URL")
    try:
        parts = urllib.parse.urlsplit(value)
    except ValueError:
        raise ValueError(f"{masked_url(value)} is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"{masked_url(value)}: a webhook URL starts with https:// (or http://) and names "
            "a host, e.g. https://hooks.slack.com/services/..."
        )
    return value


def check_events(values: Sequence[str]) -> tuple[str, ...]:
    chosen: list[str] = []
    for value in values:
        for word in str(value).split(","):
            word = word.strip().lower()
            if not word:
                continue
            if word not in NOTIFY_EVENTS:
                raise ValueError(f"unknown event {word!r} (events: {', '.join(NOTIFY_EVENTS)})")
            if word not in chosen:
                chosen.append(word)
    if not chosen:
        raise ValueError(f"name at least one event ({', '.join(NOTIFY_EVENTS)})")
    return tuple(chosen)


def plan_notify(
    urls: Sequence[str], command: str | None, on: Sequence[str], leader: Host | None
) -> Notify | None:
    """The job's notifications: its own URLs, else the leader host's inventory ones."""
    chosen = tuple(urls) or (tuple(leader.notify) if leader is not None else ())
    if not chosen and not command:
        return None
    return Notify(urls=chosen, command=command, on=tuple(on))


def masked(notify: Notify | None) -> dict[str, Any] | None:
    """What a plan, a preview or a report shows of the notifications."""
    if notify is None:
        return None
    return {
        "urls": [masked_url(u) for u in notify.urls],
        "command": notify.command,
        "on": list(notify.on),
    }


COMMAND_KEPT = "(the notify command: on the leader host only)"


def masked_document(doc: Any) -> Any:
    """A copy of a JSON document a host or a report bundle keeps (``job.json``, a
    supervisor's config) with every ``notify`` masked as :func:`masked` shows a plan's,
    and the notify command (it may hold a token) left out."""
    if isinstance(doc, list):
        return [masked_document(item) for item in doc]
    if not isinstance(doc, dict):
        return doc
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if key == "notify" and isinstance(value, dict):
            urls = value.get("urls")
            shown = {**value, "urls": [masked_url(str(u)) for u in urls or ()]}
            if value.get("command"):
                shown["command"] = COMMAND_KEPT
            out[key] = shown
        elif key == "notify" and isinstance(value, list | tuple):
            out[key] = [masked_url(str(u)) for u in value]
        elif key == "notify_command" and value:
            out[key] = COMMAND_KEPT
        else:
            out[key] = masked_document(value)
    return out


def masked_bytes(data: bytes, notify: Notify | None) -> bytes:
    """``data`` with the plan's webhook URLs replaced by their masked forms, also as JSON
    writes them: for the files a report bundle copies that are not JSON documents."""
    if notify is None:
        return data
    for url in notify.urls:
        shown = masked_url(url).encode()
        for form in {url, json.dumps(url)[1:-1], json.dumps(url, ensure_ascii=False)[1:-1]}:
            data = data.replace(form.encode("utf-8", "replace"), shown)
    return data


def notify_line(plan: JobPlan) -> str | None:
    shown = masked(plan.notify)
    if shown is None:
        return None
    where = [*shown["urls"], *([f"the command {shown['command']!r}"] if shown["command"] else [])]
    return f"notify: {', '.join(where)} on {', '.join(shown['on'])} (from the leader host)"


class NotifyChecks:
    """``notify`` (webhook URLs), ``notify_command``, ``notify_on`` of a JobSpec."""

    @field_validator("notify", mode="before")
    @classmethod
    def _notify_urls(cls, value: object) -> object:
        if isinstance(value, str):
            value = (value,)
        if isinstance(value, list | tuple):
            return tuple(check_url(str(v)) for v in value)
        return value

    @field_validator("notify_command")
    @classmethod
    def _notify_command(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return no_control_chars(value.strip(), "the notify command")

    @field_validator("notify_on", mode="before")
    @classmethod
    def _notify_on(cls, value: object) -> object:
        if isinstance(value, str):
            value = (value,)
        if isinstance(value, list | tuple):
            return check_events([str(v) for v in value])
        return value
