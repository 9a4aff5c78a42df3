"""The supervisors' wire: one JSON line per message, signed with the job's secret.

Hosts of a cluster reach each other over the training network but often have no SSH
between them, so a job's supervisors talk plain TCP there; only the job's hosts hold its
secret (made by the console, sent in the start payload, kept 0600 in the job directory).
Every message carries a fresh nonce and the sender's clock, and an HMAC-SHA256 over all
of it: a message signed with another secret, altered, too old or too new (beyond the
allowed clock skew), or replayed (a nonce already seen) is refused, and the receiver
logs why. A peer can only send what the supervisor understands (heartbeats, reports,
this job's stop and capture); nothing it sends is run.

A part of the supervisor's single source (see ``supervisor.py``): standard library only,
Python >= 3.7, names prefixed ``wire_``/``Wire``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
from typing import Any

WIRE_VERSION = 1
WIRE_SKEW_S = 120.0  # clocks of a cluster's hosts agree far better than this (NTP)
WIRE_MAX_LINE = 1 << 20


class WireRefused(Exception):
    """A message that is not from a holder of the job's secret, or not fresh."""


def wire_digest(secret: bytes, body: str) -> str:
    return hmac.new(secret, body.encode(), hashlib.sha256).hexdigest()


def wire_pack(
    secret: bytes, job_id: str, message: dict[str, Any], now: float | None = None
) -> bytes:
    """One signed line: ``{"b": BODY, "h": HMAC}`` where BODY is the JSON of the message
    with the job id, a nonce and the time, so the signature covers all of them."""
    body = json.dumps(
        {
            "v": WIRE_VERSION,
            "job": job_id,
            "nonce": os.urandom(12).hex(),
            "t": time.time() if now is None else now,
            "m": message,
        },
        separators=(",", ":"),
    )
    return (json.dumps({"b": body, "h": wire_digest(secret, body)}) + "\n").encode()


class WireGuard:
    """Checks incoming lines for one job: signature, job, freshness and replays."""

    def __init__(self, secret: bytes, job_id: str, skew_s: float = WIRE_SKEW_S) -> None:
        self.secret = secret
        self.job_id = job_id
        self.skew_s = skew_s
        self.seen: dict[str, float] = {}  # nonce -> its time, kept while it could be replayed

    def open(self, line: bytes, now: float | None = None) -> dict[str, Any]:
        """The message inside a signed line; raises WireRefused saying why not."""
        now = time.time() if now is None else now
        if len(line) > WIRE_MAX_LINE:
            raise WireRefused("line too long")
        try:
            outer = json.loads(line.decode())
            body, digest = outer["b"], outer["h"]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise WireRefused("not a signed message") from None
        if not isinstance(body, str) or not isinstance(digest, str):
            raise WireRefused("not a signed message")
        if not hmac.compare_digest(wire_digest(self.secret, body), digest):
            raise WireRefused("bad signature (not this job's secret)")
        inner = json.loads(body)
        if inner.get("v") != WIRE_VERSION:
            raise WireRefused(f"wire version {inner.get('v')!r}, expected {WIRE_VERSION}")
        if inner.get("job") != self.job_id:
            raise WireRefused(f"for job {inner.get('job')!r}, not this one")
        sent = inner.get("t")
        if not isinstance(sent, (int, float)) or abs(now - sent) > self.skew_s:
            raise WireRefused("stale or future timestamp (a replay, or clocks far apart)")
        nonce = str(inner.get("nonce"))
        if nonce in self.seen:
            raise WireRefused("replayed nonce")
        self.seen[nonce] = float(sent)
        if len(self.seen) > 4096:
            self.seen = {n: t for n, t in self.seen.items() if now - t <= self.skew_s}
        message = inner.get("m")
        if not isinstance(message, dict):
            raise WireRefused("no message")
        return message
