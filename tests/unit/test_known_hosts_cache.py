"""known_hosts files are parsed once per version of the file, not once per connection."""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh

from console.transport.connect_options import known_hosts_file


def _line(name: str, key: asyncssh.SSHKey) -> str:
    return f"{name} {key.export_public_key().decode().strip()}\n"


def test_one_parse_per_version_and_a_changed_file_is_read_again(tmp_path: Path) -> None:
    old, new = (asyncssh.generate_private_key("ssh-ed25519") for _ in range(2))
    path = tmp_path / "known_hosts"
    path.write_text(_line("node0", old))

    first = known_hosts_file(str(path))
    assert known_hosts_file(str(path)) is first  # the same parse, not a second one
    assert isinstance(first, asyncssh.SSHKnownHosts)
    assert first.match("node0", "", None)[0] == [old.convert_to_public()]

    # `distconsole keys` (or the user) rewrites the file: the new key is what counts.
    path.write_text(_line("node0", new))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    second = known_hosts_file(str(path))
    assert second is not first
    assert isinstance(second, asyncssh.SSHKnownHosts)
    assert second.match("node0", "", None)[0] == [new.convert_to_public()]


def test_an_unreadable_file_is_left_to_asyncssh_to_report(tmp_path: Path) -> None:
    missing = str(tmp_path / "absent")
    assert known_hosts_file(missing) == missing
