"""inventory.load(): the three formats, defaults, selection, and the host files' errors
naming file, line and field (hosts.yaml's: test_inventory_errors.py for its structure,
test_inventory_field_errors.py for its field values)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from console.errors import InventoryError
from console.inventory import Host, Inventory, load

SAMPLES = Path(__file__).resolve().parents[2] / "sample_hosts"


def write(tmp_path: Path, text: str, name: str = "hosts.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def error_of(path: Path) -> InventoryError:
    with pytest.raises(InventoryError) as info:
        load(path)
    return info.value


# --- samples -------------------------------------------------------------------------


SAMPLE_FILES = sorted(p for p in SAMPLES.iterdir() if p.suffix != ".md")


def test_sample_directory_holds_every_promised_file() -> None:
    names = {p.name for p in SAMPLE_FILES}
    assert {
        "local.yaml",
        "two-nodes.yaml",
        "docker-sshd-2022.yaml",
        "jump-host.yaml",
        "host_file",
        "mpi-hostfile",
    } <= names


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name)
def test_every_sample_loads(path: Path) -> None:
    inventory = load(path)
    assert inventory.hosts
    assert len({h.name for h in inventory.hosts}) == len(inventory.hosts)


def test_samples_mean_what_their_comments_say() -> None:
    local = load(SAMPLES / "local.yaml")
    assert local.hosts[0].is_local
    docker = load(SAMPLES / "docker-sshd-2022.yaml")
    assert [(h.address, h.port) for h in docker.hosts] == [("127.0.0.1", 2022), ("127.0.0.1", 2023)]
    jump = load(SAMPLES / "jump-host.yaml")
    assert jump.get("gpu-a").proxy_jump == "alice@bastion.example.org:22"
    assert jump.get("gpu-c").proxy_jump == "alice@bastion.example.org:22,ops@jump2.internal"
    assert load(SAMPLES / "host_file").format == "pssh"
    assert [h.gpus for h in load(SAMPLES / "mpi-hostfile").hosts] == [8, 8, 4]


# --- hosts.yaml ----------------------------------------------------------------------


def test_defaults_merge_and_host_values_win(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        defaults:
          user: alice
          port: 2200
          identity_file: ~/.ssh/id_test
          known_hosts: keys/known_hosts
          work_dir: ~/runs
          setup: "source ~/venv/bin/activate"
          env: {NCCL_DEBUG: WARN, OMP_NUM_THREADS: 1}
          interface: eth0
        hosts:
          - name: node0
            address: 10.0.0.10
            gpus: 8
            tags: [a100]
          - name: node1
            address: 10.0.0.11
            port: 2022
            user: bob
            env: {NCCL_DEBUG: INFO, EXTRA: "x y"}
        """,
    )
    inventory = load(path)
    node0, node1 = inventory.hosts
    assert (node0.user, node0.port, node0.gpus, node0.tags) == ("alice", 2200, 8, ("a100",))
    assert (node1.user, node1.port, node1.gpus) == ("bob", 2022, "auto")
    assert node0.env == {"NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "1"}
    assert node1.env == {"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "1", "EXTRA": "x y"}
    # local paths: ~ expanded, relative ones taken from the inventory's directory
    assert node0.identity_file == os.path.expanduser("~/.ssh/id_test")
    assert node0.known_hosts == str(tmp_path.resolve() / "keys" / "known_hosts")
    # the remote work_dir keeps its ~ for the host to expand
    assert node1.work_dir == "~/runs"
    assert node1.setup == "source ~/venv/bin/activate"
    assert node1.interface == "eth0"
    assert inventory.format == "yaml"
    assert inventory.path == str(path)


def test_name_defaults_to_address_and_string_entries(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        hosts:
          - address: gpu-1.example.org
          - carol@10.0.0.7:2222
          - "[fe80::1]:22"
        """,
    )
    a, b, c = load(path).hosts
    assert (a.name, a.address) == ("gpu-1.example.org", "gpu-1.example.org")
    assert (b.name, b.user, b.address, b.port) == ("10.0.0.7", "carol", "10.0.0.7", 2222)
    assert (c.address, c.port) == ("fe80::1", 22)


def test_select_by_name_and_tag(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        hosts:
          - {name: a, address: 10.0.0.1, tags: [a100, rack1]}
          - {name: b, address: 10.0.0.2, tags: [h100, rack1]}
          - {name: c, address: 10.0.0.3, tags: [h100, rack2]}
        """,
    )
    inventory = load(path)
    assert [h.name for h in inventory.select()] == ["a", "b", "c"]
    assert [h.name for h in inventory.select(names=["c", "a"])] == ["c", "a"]
    assert [h.name for h in inventory.select(tags=["h100"])] == ["b", "c"]
    assert [h.name for h in inventory.select(names=["a", "c"], tags=["rack2"])] == ["c"]
    assert inventory.tags == ("a100", "h100", "rack1", "rack2")
    with pytest.raises(InventoryError, match=r"no host named 'zz' \(hosts: a, b, c\)"):
        inventory.select(names=["zz"])


# --- pssh host_file and Open MPI hostfile -----------------------------------------------


def test_pssh_host_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        # comment
        alice@10.0.0.10

        10.0.0.11:2022   # trailing comment
        node2
        127.0.0.1:2201
        127.0.0.1:2202
        """,
        name="host_file",
    )
    inventory = load(path)
    assert inventory.format == "pssh"
    assert [(h.name, h.user, h.address, h.port) for h in inventory.hosts] == [
        ("10.0.0.10", "alice", "10.0.0.10", None),
        ("10.0.0.11", None, "10.0.0.11", 2022),
        ("node2", None, "node2", None),
        ("127.0.0.1:2201", None, "127.0.0.1", 2201),
        ("127.0.0.1:2202", None, "127.0.0.1", 2202),
    ]
    assert all(h.gpus == "auto" for h in inventory.hosts)


def test_mpi_hostfile(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        node0 slots=8
        node1 slots=4 max_slots=4
        node2 max-slots=2
        """,
        name="hostfile",
    )
    inventory = load(path)
    assert inventory.format == "mpi-hostfile"
    assert [(h.name, h.gpus) for h in inventory.hosts] == [
        ("node0", 8),
        ("node1", 4),
        ("node2", "auto"),
    ]


HOSTFILE_ERRORS = {
    "bad-port": ("node0\nnode1:22x\n", 2, "port", "'22x' is not a port number"),
    "port-range": ("node0\nnode1:70000\n", 2, "port", "between 1 and 65535"),
    "slots-not-number": ("node0 slots=8\nnode1 slots=four\n", 2, "slots", "whole number"),
    "option-without-value": ("node0 slots=8\nnode1 slots\n", 2, "slots", "key=value"),
    "unknown-option": ("node0 slots=8\n\nnode1 cpus=4\n", 3, "cpus", "unknown option"),
    "max-below-slots": ("node0 slots=8 max_slots=2\n", 1, "max_slots", "less than slots"),
    "listed-twice": ("# c\nnode0 slots=2\nnode0 slots=2\n", 3, "host", "first on line 2"),
    "bad-host-chars": ("node0\nno$de1\n", 2, "host", "not valid"),
    "bad-user": ("node0\nb;b@node1\n", 2, "user", "not valid"),
}


@pytest.mark.parametrize("case", sorted(HOSTFILE_ERRORS))
def test_hostfile_errors_name_line_and_field(tmp_path: Path, case: str) -> None:
    text, line, field, fragment = HOSTFILE_ERRORS[case]
    path = tmp_path / "hostfile"
    path.write_text(text)
    error = error_of(path)
    assert (error.line, error.field) == (line, field), str(error)
    assert fragment in error.detail
    assert str(error).startswith(f"{path}:{line}: {field}: ")


def test_host_model_validates_when_built_in_code() -> None:
    host = Host(name="n", address="local", identity_file="~/k", tags=("a",))
    assert host.is_local and host.identity_file == os.path.expanduser("~/k")
    with pytest.raises(ValueError, match="between 1 and 65535"):
        Host(name="n", address="a", port=0)
    inventory = Inventory(path="x", hosts=(host,))
    assert inventory.format == "yaml"
