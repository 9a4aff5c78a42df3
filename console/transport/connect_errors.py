"""Why a connection attempt failed, as a host state and a reason a user can act on."""

from __future__ import annotations

import os
import socket

import asyncssh

from console.inventory import Host
from console.transport.base import HostState


def target(host: Host) -> str:
    return f"{host.address}:{host.port}" if host.port is not None else host.address


def trust_hint(host: Host) -> str:
    port = f"-p {host.port} " if host.port is not None else ""
    known = host.known_hosts or "~/.ssh/known_hosts"
    return (
        f"check the fingerprint, then trust it with `ssh-keyscan {port}{host.address} >> {known}`"
        " or set `insecure_host_keys: true` for this inventory"
    )


def describe_connect_error(exc: BaseException, host: Host) -> tuple[HostState, str]:
    """Map one failed connect to (state, reason)."""
    where = target(host)
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return HostState.HOST_KEY_REJECTED, (
            f"host key of {where} is unknown or changed ({exc.reason}); {trust_hint(host)}"
        )
    if isinstance(exc, asyncssh.PermissionDenied):
        who = f"user {host.user!r}" if host.user else "the default user"
        key = (
            f"identity_file {host.identity_file}"
            if host.identity_file
            else "ssh-agent/default keys"
        )
        return HostState.AUTH_FAILED, (
            f"{where} refused {who} with {key}: add the public key to that user's "
            "~/.ssh/authorized_keys or fix `user`/`identity_file`"
        )
    if isinstance(exc, asyncssh.KeyImportError):
        return HostState.AUTH_FAILED, f"identity_file {host.identity_file} is unusable: {exc}"
    if isinstance(exc, TimeoutError):
        return HostState.DOWN, (
            f"no SSH answer from {where} within {host.connect_timeout:g}s (connect_timeout)"
        )
    if isinstance(exc, ConnectionRefusedError):
        return HostState.DOWN, f"connection refused by {where} (is sshd running on that port?)"
    if isinstance(exc, socket.gaierror):
        return HostState.DOWN, f"cannot resolve {host.address!r}: {exc.strerror or exc}"
    if isinstance(exc, FileNotFoundError | PermissionError):
        missing = os.fspath(exc.filename) if exc.filename is not None else str(exc)
        if host.known_hosts and os.path.expanduser(host.known_hosts) == missing:
            return HostState.HOST_KEY_REJECTED, f"known_hosts file {missing} cannot be read: {exc}"
        return HostState.AUTH_FAILED, f"cannot read {missing}: {exc.strerror or exc}"
    if isinstance(exc, OSError):
        return HostState.DOWN, f"cannot reach {where}: {exc.strerror or exc}"
    if isinstance(exc, asyncssh.Error):
        return HostState.DOWN, f"{where}: {exc.reason or type(exc).__name__}"
    return HostState.DOWN, f"{where}: {type(exc).__name__}: {exc}"
