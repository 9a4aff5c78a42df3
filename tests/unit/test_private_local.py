"""Issue 23 item 1 on the console's machine: the job history's file is 600 whatever the
umask, an older history file left 644 is tightened when opened, and a folder the user
named (an existing ``--out`` or ``DISTCONSOLE_DATA_DIR``) keeps its mode while what is
written in it is private."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from console.jobs.history import JobHistory
from console.jobs.private import private_dir, write_private


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_history_file_private_in_a_folder_the_user_named(tmp_path: Path) -> None:
    named = tmp_path / "named"
    named.mkdir(mode=0o755)
    named.chmod(0o755)
    old = os.umask(0o022)
    try:
        JobHistory(named / "jobs.sqlite3")
        (named / "older.sqlite3").write_bytes(b"")
        (named / "older.sqlite3").chmod(0o644)
        JobHistory(named / "older.sqlite3")
        fresh = tmp_path / "fresh" / "data"
        JobHistory(fresh / "jobs.sqlite3")
    finally:
        os.umask(old)
    assert mode(named / "jobs.sqlite3") == 0o600
    assert mode(named / "older.sqlite3") == 0o600
    assert mode(named) == 0o755
    assert mode(fresh) == 0o700 and mode(fresh / "jobs.sqlite3") == 0o600


def test_bundle_files_private_in_an_existing_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o755)
    private_dir(out, tighten_existing=False)
    (out / "summary.txt").write_text("old")
    (out / "summary.txt").chmod(0o644)
    write_private(out / "summary.txt", "new")
    hosts = private_dir(out / "hosts")
    assert mode(out) == 0o755
    assert mode(out / "summary.txt") == 0o600 and (out / "summary.txt").read_text() == "new"
    assert mode(hosts) == 0o700
