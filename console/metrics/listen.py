"""Where an endpoint listens: ``ADDR:PORT`` as the command line gives it (no imports
beyond the standard library: the console's option parsing reads it)."""

from __future__ import annotations

DEFAULT_ADDRESS = "127.0.0.1"


def parse_listen(text: str) -> tuple[str, int]:
    """``ADDR:PORT``, ``:PORT`` or ``PORT`` (address 127.0.0.1); ``[::1]:PORT`` for IPv6."""
    address, sep, port_text = text.rpartition(":")
    if not sep:
        address, port_text = "", text
    address = address.strip("[]") or DEFAULT_ADDRESS
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"not ADDR:PORT: {text!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"port out of range: {port}")
    return address, port
