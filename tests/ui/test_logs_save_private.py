"""Issue 23 item 1: the logs screen's save (ctrl+s) writes the job's logs private to
their user (600) whatever the umask, through the real screen (Pilot)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from test_logs_screen import make_app, open_logs


async def test_saved_logs_are_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    old = os.umask(0o022)
    try:
        app = make_app()
        async with app.run_test(size=(180, 50)) as pilot:
            screen = await open_logs(pilot)
            await pilot.press("ctrl+s")
            await pilot.pause()
    finally:
        os.umask(old)
    saved = tmp_path / "demo-1-logs.txt"
    assert saved.read_text().splitlines() == screen.shown_text()
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
