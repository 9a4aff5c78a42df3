"""``distconsole keys HOSTS [--dry-run] [--remove]``: every host can SSH to every other by
its inventory name, without a password, host keys verified.

Each host gets its own key (``~/.ssh/id_distconsole``, ed25519, kept when present), every
host's public key in its ``authorized_keys``, every host's host key in its
``known_hosts`` (the keys this console's own known_hosts trusted for the connection it
holds: nothing is learnt on first use), and one ``~/.ssh/config`` block with a ``Host
<inventory name>`` entry per host (HostName, Port, User, the key). The lines and the
block carry the tool's marks (``hostprogs/keys_program.py``), so a second run changes
nothing, ``--remove`` takes out exactly them, and no other line is touched.
``--dry-run`` prints what would change per host. Exit 0 done (or nothing to do),
1 when a host is not up or a step failed, 2 for bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import ipaddress
import json
import os
from collections.abc import Sequence
from importlib import resources
from typing import Any

import asyncssh

from console import inventory as inventory_module
from console.commands.parts import options
from console.errors import HostUnavailable, TransportError, UsageError
from console.hostprogs import keys_program
from console.inventory import Host
from console.transport.base import HostConnection
from console.transport.hello import check_hello
from console.transport.pool import ClusterConnections
from console.transport.ship import HostProgram, shipment

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"  # what asyncssh (and OpenSSH) read by default
TIMEOUT_S = 60.0


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "keys",
        help="let every host SSH to every other by name (keys, known_hosts, ~/.ssh/config)",
        description="Give every host a key (~/.ssh/id_distconsole, kept if present), "
        "authorise it on the others, write the host keys this console verified into each "
        "known_hosts and a Host block per peer into ~/.ssh/config. Only lines marked "
        f"{keys_program.MARK} and the marked config block are ever changed.",
    )
    options.add_inventory(parser)
    options.add_host_selection(parser)
    parser.add_argument("--dry-run", action="store_true", help="print what would change")
    parser.add_argument(
        "--remove", action="store_true", help="take this tool's lines and block out again"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    inventory = inventory_module.load(args.inventory)
    hosts = options.selected_hosts(inventory, args.names, args.tags)
    local = [h.name for h in hosts if h.is_local]
    if local:
        raise UsageError(
            "HOSTS", f"{', '.join(local)} is this machine (address local); peers cannot reach it"
        )
    return asyncio.run(keys(hosts, dry_run=args.dry_run, remove=args.remove))


@functools.cache
def program_source() -> str:
    text = resources.files("console.hostprogs").joinpath("keys_program.py").read_text()
    if text.startswith('"""'):
        text = text[text.index('"""', 3) + 3 :].lstrip("\n")
    return "# distconsole keys helper (console/hostprogs/keys_program.py)\n" + text


async def helper(
    connection: HostConnection, op: str, args: dict[str, Any], stdin: str = ""
) -> dict[str, Any]:
    """Run one keys_program operation; its last record, or TransportError naming the host."""
    host = connection.host.name
    words = (op, json.dumps(args, separators=(",", ":")))
    program = HostProgram(keys_program.PROGRAM, program_source(), words, stdin="")
    result = await connection.run(
        shipment(connection.host, program, setup=False).command, input=stdin, timeout=TIMEOUT_S
    )
    records = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    if not records:
        raise TransportError(f"{host}: keys: no answer ({result.stderr.strip()[-300:]})")
    check_hello(host, keys_program.PROGRAM, keys_program.VERSION, records[0])
    last: dict[str, Any] = records[-1]
    if "error" in last or not result.ok:
        raise TransportError(f"{host}: keys {op}: {last.get('error') or result.stderr.strip()}")
    return last


def trusted_host_keys(host: Host) -> list[str]:
    """``TYPE BASE64`` of every key this console's known_hosts trusts for ``host``."""
    if host.insecure_host_keys:
        raise UsageError(
            "HOSTS",
            f"{host.name} is reached with insecure_host_keys: this console never verified "
            "its host key, so it cannot vouch for it to the other hosts",
        )
    path = os.path.expanduser(host.known_hosts or DEFAULT_KNOWN_HOSTS)
    try:
        known = asyncssh.read_known_hosts(path)
    except (OSError, ValueError) as exc:
        raise UsageError("HOSTS", f"{host.name}: cannot read known_hosts {path}: {exc}") from None
    try:
        ip = str(ipaddress.ip_address(host.address))
    except ValueError:
        ip = ""  # a name: asyncssh matches it as a host pattern
    matched = known.match(host.address, ip, None if host.port in (None, 22) else host.port)[0]
    # dict: asyncssh answers a line once for the name and once more for the address.
    found = list(
        dict.fromkeys(" ".join(k.export_public_key().decode().split()[:2]) for k in matched)
    )
    if not found:
        raise UsageError("HOSTS", f"{host.name}: no host key for {host.address} in {path}")
    return found


def host_pattern(host: Host) -> str:
    return host.address if host.port in (None, 22) else f"[{host.address}]:{host.port}"


def config_block(hosts: Sequence[Host]) -> list[str]:
    lines: list[str] = []
    for host in hosts:
        lines += [f"Host {host.name}", f"  HostName {host.address}"]
        if host.port is not None:
            lines.append(f"  Port {host.port}")
        if host.user is not None:
            lines.append(f"  User {host.user}")
        lines += [f"  IdentityFile ~/.ssh/{keys_program.KEY_NAME}", "  IdentitiesOnly yes"]
    return lines


def wanted_files(hosts: Sequence[Host], public: dict[str, str | None]) -> dict[str, Any]:
    mark = keys_program.MARK
    authorized: dict[str, str] = {}
    for host in hosts:
        key = public[host.name]
        material = " ".join(key.split()[:2]) if key else f"(new key of {host.name})"
        authorized.setdefault(material, f"{material} {mark}{host.name}")  # shared homes
    known = [
        f"{host_pattern(h)} {key} {mark}{h.name}" for h in hosts for key in trusted_host_keys(h)
    ]
    return {
        "authorized_keys": list(authorized.values()),
        "known_hosts": known,
        "config": config_block(hosts),
    }


def describe(host: str, files: dict[str, Any], dry_run: bool) -> list[str]:
    verb = "would change" if dry_run else "changed"
    out = []
    for change in files.values():
        if not change["changed"]:
            continue
        out.append(
            f"{host}: {verb} {change['path']}: +{len(change['added'])} -{len(change['removed'])}"
        )
        out += [f"  + {line}" for line in change["added"]]
        out += [f"  - {line}" for line in change["removed"]]
    return out


async def keys(hosts: Sequence[Host], *, dry_run: bool, remove: bool) -> int:
    pool = ClusterConnections(hosts)
    try:
        await pool.wait_settled()
        down = [s for s in pool.statuses().values() if not s.is_up]
        if down:
            s = down[0]
            raise HostUnavailable(s.name, s.state.value, s.reason or "not connected")
        conns = [pool[h.name] for h in hosts]
        public: dict[str, str | None] = {}
        created = False
        wanted: dict[str, Any] = {"authorized_keys": [], "known_hosts": [], "config": []}
        if not remove:
            for host in hosts:
                trusted_host_keys(host)  # refuse before changing anything
            answers = await asyncio.gather(
                *(helper(c, "key", {"name": c.host.name, "dry_run": dry_run}) for c in conns)
            )
            for conn, answer in zip(conns, answers, strict=True):
                public[conn.host.name] = answer.get("public_key")
                if answer.get("created"):
                    created = True
                    verb = "would create" if dry_run else "created"
                    print(f"{conn.host.name}: {verb} ~/.ssh/{keys_program.KEY_NAME}")
            wanted = wanted_files(hosts, public)
        request = json.dumps({**wanted, "dry_run": dry_run, "remove": remove})
        results = await asyncio.gather(*(helper(c, "apply", {}, request) for c in conns))
        changed = False
        for conn, result in zip(conns, results, strict=True):
            lines = describe(conn.host.name, result["files"], dry_run)
            changed = changed or bool(lines)
            for line in lines:
                print(line)
        if not changed and not created:
            print(f"nothing to change on {len(hosts)} host(s)")
        return 0
    finally:
        await pool.close()
