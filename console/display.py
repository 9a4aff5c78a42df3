"""How values read when shown to people: one definition shared by the screens and the CLI.

Plain strings only (no textual, no rich): the UI wraps them in its own cells, the CLI
prints them. A figure a host or driver does not report is ``None`` in the core and
reads :data:`NOT_REPORTED` everywhere it is shown.
"""

from __future__ import annotations

import re
import time

from console.inventory import Host
from console.logs.models import LogLine, rank_key, rank_label

# One marker for "the host did not report this": "-" reads as a minus sign or "zero"
# next to figures, "?" as an error of ours.
NOT_REPORTED = "n/r"


def figure(value: float | int | str | None, unit: str = "", digits: int = 0) -> str:
    """A number with its unit (``"87%"``, ``"412 W"``), or :data:`NOT_REPORTED`."""
    if value is None:
        return NOT_REPORTED
    if isinstance(value, str):
        return value
    return f"{value:.{digits}f}{unit}"


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
        return NOT_REPORTED
    if ms < 10:
        return f"{ms:.1f} ms"
    if ms < 10_000:
        return f"{ms:.0f} ms"
    return f"{ms / 1000:.1f} s"


def duration(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour on (job run times)."""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def byte_size(value: int | None) -> str:
    """``12.3 GiB``; :data:`NOT_REPORTED` when unknown."""
    if value is None:
        return NOT_REPORTED
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"


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


# -- log lines -------------------------------------------------------------------------


def line_prefix(line: LogLine) -> str:
    """``node0 r3``, ``node1 worker1``, ``node0 launcher``: who wrote the line. The host
    is printed once (a launcher's key carries it again after ``@``)."""
    return f"{line.host} {rank_label(rank_key(line)).split('@', 1)[0]}"


# What a rank writes reaches the user's terminal: keep its colours and drop every other
# control sequence and control character, as ``less -R`` does (issue 23: a rank's
# ESC]0;title BEL retitled the terminal running `distconsole logs`, ESC[2J cleared it).
_CONTROL = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"  # CSI, SGR (colours) among them
    # OSC, DCS, SOS, PM, APC: up to BEL or ST, or to the line's end (a terminal would
    # swallow the lines after an unended one)
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d-\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c|$)"
    r"|\x1b[ -/]*[0-~]"  # other escape sequences (charsets, keypad, ESC c resets all)
    r"|[\x00-\x08\x0a-\x1f\x7f-\x9f]"  # control characters, C1 too; a tab stays
)
_SGR = re.compile(r"\x1b\[[0-9;:]*m")
_ANY_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def _kept(match: re.Match[str]) -> str:
    text = match[0]
    return text if text[-1] == "m" and _SGR.fullmatch(text) else ""


def terminal_safe(text: str) -> str:
    """``text`` with its colours (SGR, ``ESC[...m``) and tabs, and no other control
    sequence or control character: what may go to a terminal as it is."""
    if _ANY_CONTROL.search(text) is None:
        return text  # the usual line: nothing to look at
    return _CONTROL.sub(_kept, text)


def plain(text: object) -> str:
    """A value from a host (a GPU name, a job name, a reason) as one line of plain text
    for a terminal or a table cell: every control sequence dropped (colours too), every
    other control character (a newline, a tab) a space, so no value draws on the
    terminal or makes a row of its own; a lone surrogate (a job.json's ``"\\udc80"``)
    reads "?" instead of failing the print. None reads :data:`NOT_REPORTED`."""
    if text is None:
        return NOT_REPORTED
    line = str(text).replace("\t", " ")
    if _ANY_CONTROL.search(line) is not None:
        line = _ANY_CONTROL.sub(" ", _CONTROL.sub(_dropped, line))
    return line.encode("utf-8", "replace").decode("utf-8")


def plain_lines(text: str) -> str:
    """Several lines (a failure's description), each made :func:`plain`; the newlines
    between them (and a last one) stay."""
    return "\n".join(plain(line) for line in text.split("\n"))


def _dropped(match: re.Match[str]) -> str:
    # A lone control character is a space (a newline parts words); a sequence goes.
    return " " if len(match[0]) == 1 and match[0] != "\x1b" else ""


def log_line_text(line: LogLine, *, raw: bool = False) -> str:
    """A log line as plain text, the way ``distconsole logs`` prints it and the logs
    screen saves it: ``node0 r3| text``, made :func:`terminal_safe` unless ``raw``."""
    return f"{line_prefix(line)}| {line.text if raw else terminal_safe(line.text)}"


def gap_text(skipped: int) -> str:
    """Lines left out of a view (they stay in the store and on the hosts)."""
    return f"··· {skipped} lines ···"


# -- job states ------------------------------------------------------------------------


def clock(when: float | None) -> str:
    """``22:14:03`` (local time), or :data:`NOT_REPORTED`."""
    return NOT_REPORTED if when is None else time.strftime("%H:%M:%S", time.localtime(when))


def job_ended_text(state: str, ended: float | None, failure: str | None = None) -> str:
    """The last line ``distconsole logs`` prints of a job that has ended:
    ``job ended: failed (node1 worker 1 (rank 1) failed: exit status 3) at 22:14:03``;
    the first line of the failure only (``jobs`` and ``report`` give the rest)."""
    first = (failure or "").strip().splitlines()
    cause = f" ({first[0]})" if first else ""
    return f"job ended: {state}{cause} at {clock(ended)}"
