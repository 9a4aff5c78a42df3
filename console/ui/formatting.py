"""How values read in tables: relative times, latencies, host addresses."""

from __future__ import annotations

from rich.text import Text

from console.inventory import Host


def plain(value: object) -> Text:
    """A table cell shown as is: DataTable parses plain strings as markup, so a reason
    such as "[Errno 111] Connection refused" would lose its brackets."""
    return Text(str(value))


def ago(then: float | None, now: float) -> str:
    """``then`` relative to ``now`` (both epoch seconds): "12s ago", "3m ago", "never"."""
    if then is None:
        return "never"
    seconds = max(0.0, now - then)
    if seconds < 1:
        return "just now"
    if seconds < 60:
        return f"{int(seconds)}s ago"
    if seconds < 3600:
        return f"{int(seconds // 60)}m ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h ago"
    return f"{int(seconds // 86400)}d ago"


def latency(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms < 10:
        return f"{ms:.1f} ms"
    if ms < 10_000:
        return f"{ms:.0f} ms"
    return f"{ms / 1000:.1f} s"


def address(host: Host) -> str:
    """``user@address:port`` with the parts the inventory leaves to ~/.ssh/config omitted."""
    if host.is_local:
        return "local"
    text = host.address if host.user is None else f"{host.user}@{host.address}"
    return text if host.port is None else f"{text}:{host.port}"


def clip(text: str, width: int) -> str:
    """One line of at most ``width`` characters; the full text stays in the detail line."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"
