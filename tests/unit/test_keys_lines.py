"""What ``distconsole keys`` writes and what --dry-run says it would: one known_hosts
line per host key (an address host matched twice, by name and by address), and every
line of the config block counted as added even where the user's own config already has
an equal line (the demo's homes hold ``Host node0`` / ``HostName`` entries)."""

from __future__ import annotations

from pathlib import Path

import asyncssh
import pytest

from console.commands.keys import config_block, trusted_host_keys
from console.hostprogs import keys_program
from console.inventory import Host


def test_an_address_host_s_key_is_written_once(tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    material = key.export_public_key().decode().strip()
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.42.0.1]:2222 {material}\n")
    host = Host(name="n0", address="127.42.0.1", port=2222, known_hosts=str(known))
    assert trusted_host_keys(host) == [" ".join(material.split()[:2])]


def test_dry_run_counts_every_block_line_the_user_s_config_already_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    hosts = [Host(name=f"n{i}", address=f"127.42.0.{i + 1}", port=2222, user="u") for i in (0, 1)]
    block = config_block(hosts)
    users_own = [line for line in block if "Identit" not in line]  # Host/HostName/Port/User
    (tmp_path / ".ssh").mkdir()
    config = tmp_path / ".ssh" / "config"
    config.write_text("".join(line + "\n" for line in users_own))

    changes = keys_program.apply({"config": block, "dry_run": True})["config"]
    assert changes["added"] == [keys_program.BEGIN, *block, keys_program.END, ""]
    assert changes["removed"] == []
    assert config.read_text() == "".join(line + "\n" for line in users_own)  # dry run
