"""Fixtures of the fault tests (the scripted SSH server itself: ``scripted_ssh`` in
tests/conftest.py)."""

from __future__ import annotations

import pytest

from console.transport import ssh


@pytest.fixture
def fast_reconnect(monkeypatch: pytest.MonkeyPatch) -> None:
    """The product's reconnect back-off started at 0.05 s instead of 0.5 s, for tests
    about what happens after a reconnect rather than when it happens."""
    real = ssh.backoff_delay
    monkeypatch.setattr(ssh, "backoff_delay", lambda attempt: real(attempt, first=0.05))
