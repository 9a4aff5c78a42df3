"""Connection options chosen for speed, each one standing aside for the user's own.

- known_hosts: hosts of one inventory share one file, which asyncssh would parse again
  for every connection (64 hosts: 64 x 64 keys, a third of a 64-host start's connect
  CPU). It is parsed once per version of the file; a changed file (`keys`) is read again.
- ciphers: asyncssh's chacha20-poly1305 costs about six times the CPU of AES-GCM per
  packet (15-19 us against 2-3 us, measured on this project's 2-core VM with AES
  instructions), about a sixth of a 64-host console's steady CPU. Both are in OpenSSH's
  defaults, which put chacha first for CPUs without AES instructions; the console's CPU
  is the one that matters here, so AES-GCM is offered first. A ``Ciphers`` line in the
  user's ssh config wins: then nothing is changed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

import asyncssh

_KNOWN_HOSTS: dict[str, tuple[tuple[int, int], asyncssh.SSHKnownHosts]] = {}

# Prepended to asyncssh's default list ("^"), so a server without AES-GCM still agrees.
PREFERRED_CIPHERS = "^aes128-gcm@openssh.com,aes256-gcm@openssh.com"
DEFAULT_SSH_CONFIG = "~/.ssh/config"
_CIPHERS_LINE = re.compile(r"^\s*ciphers[\s=]", re.IGNORECASE | re.MULTILINE)
_INCLUDE_LINE = re.compile(r"^\s*include[\s=]+(.+)$", re.IGNORECASE | re.MULTILINE)
MAX_INCLUDE_DEPTH = 8
_CONFIG_NAMES_CIPHERS: dict[str, tuple[tuple[int, int], bool]] = {}


def _version(path: str) -> tuple[int, int]:
    stat = os.stat(path)
    return stat.st_mtime_ns, stat.st_size


def known_hosts_file(path: str) -> asyncssh.SSHKnownHosts | str:
    """``path`` parsed once per version of the file; the path itself when it cannot be
    read here, so asyncssh reports the problem as it would for any connection."""
    try:
        version = _version(path)
        cached = _KNOWN_HOSTS.get(path)
        if cached is not None and cached[0] == version:
            return cached[1]
        parsed = asyncssh.read_known_hosts(path)
    except (OSError, ValueError):
        return path
    _KNOWN_HOSTS[path] = (version, parsed)
    return parsed


def _names_ciphers(path: str, base: Path, depth: int = 0) -> bool:
    """Whether ``path`` or a file it includes (relative to ``base``, as ssh and asyncssh
    read ``Include``) has a ``Ciphers`` line."""
    try:
        version = _version(path)
    except OSError:
        return False  # no such file: nothing there to respect
    cached = _CONFIG_NAMES_CIPHERS.get(path)
    if cached is not None and cached[0] == version:
        return cached[1]
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            text = file.read()
    except OSError:
        return True  # unreadable here: asyncssh decides, as it would without us
    names = bool(_CIPHERS_LINE.search(text))
    includes = _INCLUDE_LINE.findall(text)
    for line in includes:
        if names:
            break
        if depth >= MAX_INCLUDE_DEPTH:
            names = True  # too deep to follow: leave the choice to asyncssh
            break
        for pattern in line.split():
            included = Path(os.path.expanduser(pattern.strip('"')))
            root, rest = (
                (Path(included.anchor), str(Path(*included.parts[1:])))
                if included.anchor
                else (base, str(included))
            )
            if any(_names_ciphers(str(f), base, depth + 1) for f in root.glob(rest)):
                names = True
                break
    if not includes:  # an included file can change on its own: read those every time
        _CONFIG_NAMES_CIPHERS[path] = (version, names)
    return names


def cipher_preference(ssh_config: Sequence[str] | None) -> str | None:
    """The ``encryption_algs`` option to pass, None to leave asyncssh's (and the user's
    ``Ciphers``) choice alone. ``ssh_config``: the config files the connection reads
    (None: asyncssh's default, ~/.ssh/config)."""
    paths = ssh_config if ssh_config is not None else [DEFAULT_SSH_CONFIG]
    for given in paths:
        path = Path(os.path.expanduser(given))
        if _names_ciphers(str(path), path.parent):
            return None
    return PREFERRED_CIPHERS
