"""The demo cluster's files: its inventory, keys, known_hosts and each host's ~/.ssh.

The console reaches the hosts with ``<root>/client_key`` and ``<root>/known_hosts``
(named in the inventory). The hosts reach each other the same way a real cluster's do:
each home has ``.ssh/config`` naming every peer (by address and by name) with the
cluster's key, a ``known_hosts`` listing every peer's key (checked strictly) and
``BatchMode``, so ``mpirun``/``horovodrun`` on one host log in to the others without a
prompt. OpenSSH's ``ssh`` finds ``~/.ssh`` through the account's passwd entry, not
``$HOME``, and every demo host shares the caller's account, so ``<root>/bin/ssh``
(first on each host's PATH) runs the real ssh with ``-F $HOME/.ssh/config``.
"""

from __future__ import annotations

import getpass
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from console.transport.demo_shapes import DemoClusterShape as DemoCluster
from console.transport.demo_shapes import DemoHostShape as DemoNode

DEMO_GPUS = 4
# Every demo host is this machine: ranks, daemons and rendezvous talk over loopback.
DEMO_INTERFACE = "lo"
# mpirun refuses root unless told; as root (a container, CI) the demo allows it openly.
ROOT_MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
KEY_NAME = "id_ed25519"


def inventory_data(cluster: DemoCluster) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "user": getpass.getuser(),
        "port": cluster.port,
        "identity_file": str(cluster.client_key_path),
        "known_hosts": str(cluster.known_hosts_path),
        "connect_timeout": 5,
        "python": sys.executable,
        "gpus": DEMO_GPUS,
        "gpu_source": "simulated",
        "interface": DEMO_INTERFACE,
    }
    if os.geteuid() == 0:
        defaults["env"] = dict(ROOT_MPI_ENV)
    return {
        "defaults": defaults,
        "hosts": [
            {
                "name": n.name,
                "address": n.address,
                "work_dir": str(n.work_dir),
                "tags": list(n.tags),
            }
            for n in cluster.nodes
        ],
    }


def write_cluster_files(cluster: DemoCluster) -> None:
    _write_private(cluster.client_key_path, cluster.client_key.export_private_key().decode())
    known_hosts = "".join(_known_hosts_line(n) for n in cluster.nodes)
    cluster.known_hosts_path.write_text(known_hosts)
    _write_ssh_wrapper(cluster.bin_dir)
    for node in cluster.nodes:
        _write_node_ssh(cluster, node, known_hosts)
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    with cluster.inventory_path.open("w") as out:
        out.write(
            f"# distconsole demo cluster: {len(cluster.nodes)} in-process SSH servers on "
            f"loopback ({cluster.nodes[0].address}..), port {cluster.port}. "
            "GPUs are simulated (no GPU here).\n"
        )
        yaml.dump(inventory_data(cluster), out)


def _known_hosts_line(node: DemoNode) -> str:
    key = node.host_key.export_public_key().decode().strip()
    return f"[{node.address}]:{node.port} {key}\n"


def _write_private(path: Path, text: str) -> None:
    # OpenSSH refuses a key or config that others can read or write.
    path.write_text(text)
    path.chmod(0o600)


def _write_node_ssh(cluster: DemoCluster, node: DemoNode, known_hosts: str) -> None:
    ssh_dir = node.home / ".ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    ssh_dir.chmod(0o700)
    key_path = ssh_dir / KEY_NAME
    _write_private(key_path, cluster.client_key.export_private_key().decode())
    (ssh_dir / f"{KEY_NAME}.pub").write_text(cluster.client_key.export_public_key().decode())
    _write_private(ssh_dir / "known_hosts", known_hosts)
    # Names map to addresses; every address and name then shares one block, so the
    # file grows by a line or two per peer, not a block (256 hosts, 256 files).
    names = "".join(f"Host {peer.name}\n  HostName {peer.address}\n" for peer in cluster.nodes)
    everyone = " ".join([*(p.name for p in cluster.nodes), *(p.address for p in cluster.nodes)])
    shared = (
        f"Host {everyone}\n"
        f"  Port {cluster.port}\n"
        f"  User {getpass.getuser()}\n"
        f"  IdentityFile {_ssh_config_path(key_path)}\n"
        "  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {_ssh_config_path(ssh_dir / 'known_hosts')}\n"
        "  StrictHostKeyChecking yes\n"
        "  BatchMode yes\n"
        "  LogLevel ERROR\n"
    )
    _write_private(ssh_dir / "config", names + shared)


def _ssh_config_path(path: Path) -> str:
    # ssh_config takes double quotes around a path with spaces (a --dir may have them).
    text = str(path)
    return f'"{text}"' if any(c.isspace() for c in text) else text


def _write_ssh_wrapper(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    real = shutil.which("ssh", path=_path_without(bin_dir))
    if real is None:
        body = (
            "echo 'distconsole demo: MPI and Horovod jobs need the OpenSSH client (ssh) "
            "on this machine: install it (Debian: apt-get install openssh-client)' >&2\n"
            "exit 255\n"
        )
    else:
        body = f'exec {shlex.quote(real)} -F "$HOME/.ssh/config" "$@"\n'
    wrapper = bin_dir / "ssh"
    wrapper.write_text(
        "#!/bin/sh\n"
        "# distconsole demo: every demo host shares this account, whose passwd home is\n"
        "# where OpenSSH looks for ~/.ssh; each demo host's own config is in $HOME.\n" + body
    )
    wrapper.chmod(0o755)


def _path_without(directory: Path) -> str:
    parts = os.environ.get("PATH", os.defpath).split(os.pathsep)
    return os.pathsep.join(p for p in parts if p and Path(p).resolve() != directory.resolve())
