"""console/names.py is the one owner of every name rule: the inventory, the job spec, the
transport and the CLI accept and refuse the same names."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from console import names
from console.errors import InventoryError, JobSpecError, TransportError
from console.inventory import load
from console.jobs.spec import make_spec, parse_env
from console.transport.base import with_env


def inventory_interface(tmp_path: Path, value: str) -> str | None:
    path = tmp_path / "hosts.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            hosts:
              - name: a
                address: 10.0.0.1
                interface: "{value}"
            """
        )
    )
    return load(path).hosts[0].interface


@pytest.mark.parametrize("value", ["eth0", "eth0:1", "ib0", "enp5s0f1", "bond0.100"])
def test_interface_names_valid_in_the_form_are_valid_in_hosts_yaml(
    tmp_path: Path, value: str
) -> None:
    assert names.interface_problem(value) is None
    assert make_spec(kind="ddp", program="t.py", interface=value).interface == value
    assert inventory_interface(tmp_path, value) == value


@pytest.mark.parametrize("value", ["eth0; rm -rf /", "a" * 16, "eth 0", "eth0/1", "veth@if5"])
def test_interface_names_refused_by_one_are_refused_by_all(tmp_path: Path, value: str) -> None:
    assert names.interface_problem(value)
    with pytest.raises(JobSpecError, match="not a network interface name"):
        make_spec(kind="ddp", program="t.py", interface=value)
    with pytest.raises(InventoryError, match="not a network interface name"):
        inventory_interface(tmp_path, value)


@pytest.mark.parametrize("name", ["1BAD", "A-B", "", "A B", "X=1"])
def test_env_names_are_refused_the_same_way_everywhere(name: str) -> None:
    problem = names.env_name_problem(name)
    assert problem and "not a valid environment variable name" in problem
    with pytest.raises(JobSpecError, match="not a valid environment variable name"):
        make_spec(kind="ddp", program="t.py", env={name: "x"})
    with pytest.raises(TransportError, match="not a valid environment variable name"):
        with_env("true", {name: "x"})
    if "=" not in name:
        with pytest.raises(JobSpecError, match="not a valid environment variable name"):
            parse_env([f"{name}=x"])


@pytest.mark.parametrize(
    ("job_id", "ok"),
    [
        ("ddp-train-20261124-101500-a1b2c3", True),
        ("a", True),
        ("../etc", False),
        ("a..b", False),
        ("-x", False),
        ("a b", False),
        ("a" * 81, False),
    ],
)
def test_job_ids(job_id: str, ok: bool) -> None:
    assert names.valid_job_id(job_id) is ok
    assert (names.job_id_problem(job_id) is None) is ok


def test_path_stem_keeps_only_path_safe_characters() -> None:
    assert names.path_stem("my job/../x") == "my-job-..-x"
    assert names.path_stem("///") == "job"
    assert len(names.path_stem("x" * 100)) == 48
