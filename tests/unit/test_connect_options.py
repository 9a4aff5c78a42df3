"""The cipher preference stands aside whenever the user's ssh config names ciphers."""

from __future__ import annotations

from pathlib import Path

from console.transport.connect_options import PREFERRED_CIPHERS, cipher_preference


def test_no_config_or_no_ciphers_line_prefers_aes_gcm(tmp_path: Path) -> None:
    assert cipher_preference([str(tmp_path / "absent")]) == PREFERRED_CIPHERS
    config = tmp_path / "config"
    config.write_text("Host *\n  ServerAliveInterval 30\n  # Ciphers in a comment\n")
    assert cipher_preference([str(config)]) == PREFERRED_CIPHERS


def test_a_ciphers_line_leaves_the_choice_to_the_config(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host legacy\n  Ciphers=aes128-ctr\n")
    assert cipher_preference([str(config)]) is None


def test_ciphers_in_an_included_file_count(tmp_path: Path) -> None:
    (tmp_path / "config.d").mkdir()
    (tmp_path / "config.d" / "site.conf").write_text("Host *\n    ciphers aes256-ctr\n")
    config = tmp_path / "config"
    config.write_text("Include config.d/*.conf\nHost *\n  User me\n")
    assert cipher_preference([str(config)]) is None
    # The included file changes on its own: read again.
    (tmp_path / "config.d" / "site.conf").write_text("Host *\n  User you\n")
    assert cipher_preference([str(config)]) == PREFERRED_CIPHERS
    # An absolute include.
    other = tmp_path / "other.conf"
    other.write_text("Ciphers aes128-gcm@openssh.com\n")
    config.write_text(f'Include "{other}"\n')
    assert cipher_preference([str(config)]) is None
