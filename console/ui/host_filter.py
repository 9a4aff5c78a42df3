"""Which hosts the GPU screen shows: the ``/`` filter and the attention view, shared by
its dense and detailed views, and the line it shows when they leave no host."""

from __future__ import annotations

from console.inventory import Host
from console.probe.models import HostView
from console.ui.attention import Thresholds, host_needs_attention


def matches(host: Host, query: str) -> bool:
    """``/`` filter: a case-insensitive substring of the host's name or of one of its tags."""
    q = query.strip().lower()
    return not q or q in host.name.lower() or any(q in t.lower() for t in host.tags)


def host_shown(
    host: Host,
    view: HostView | None,
    *,
    query: str,
    attention_only: bool,
    thresholds: Thresholds,
) -> bool:
    """A host without a view yet stays in the attention view: nothing says it is fine."""
    if not matches(host, query):
        return False
    if attention_only:
        return view is None or host_needs_attention(view, thresholds)
    return True


def no_match_text(query: str, attention_only: bool) -> str:
    query = query.strip()
    if query and attention_only:
        return f"no host matches {query!r} and needs attention (a: every host)"
    if query:
        return f"no host matches {query!r} (Esc clears the filter)"
    return "no host needs attention (a: every host)"
