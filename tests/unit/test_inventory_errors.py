"""inventory.load() on a hosts.yaml whose structure is wrong (YAML syntax, unknown or
duplicate keys, missing or misplaced entries, no file): each error names file, line and
field. The wrong values of a field: test_inventory_field_errors.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_inventory import error_of, write

# Each case: file text, expected (line, field, message fragment).
YAML_ERRORS = {
    "yaml-syntax": (
        """
        hosts:
          - name: a
            address: [10.0.0.1
          - name: b
        """,
        3,  # where the '[' opened; the parser stopped on line 4 (tests/unit/test_yaml_syntax.py)
        None,
        "YAML syntax error",
    ),
    "duplicate-yaml-key": (
        """
        hosts:
          - name: a
            address: 10.0.0.1
            address: 10.0.0.2
        """,
        4,
        None,
        'duplicate key "address"',
    ),
    "unknown-host-key": (
        """
        hosts:
          - name: a
            address: 10.0.0.1
            gpu: 4
        """,
        4,
        "hosts[0].gpu",
        "unknown key",
    ),
    "unknown-default-key": (
        """
        defaults:
          usr: alice
        hosts:
          - {name: a, address: 10.0.0.1}
        """,
        2,
        "defaults.usr",
        "unknown key",
    ),
    "unknown-top-level-key": (
        """
        hosts:
          - {name: a, address: 10.0.0.1}
        host: b
        """,
        3,
        "host",
        "unknown top-level key",
    ),
    "wrong-type": (
        """
        hosts:
          - name: a
            address: 10.0.0.1
          - name: b
            address: 10.0.0.2
            insecure_host_keys: maybe
        """,
        6,
        "hosts[1].insecure_host_keys",
        "must be true or false",
    ),
    "duplicate-name": (
        """
        hosts:
          - name: a
            address: 10.0.0.1
          - name: b
            address: 10.0.0.2
          - name: a
            address: 10.0.0.3
        """,
        6,
        "hosts[2].name",
        "duplicate host name 'a' (also hosts[0], line 2)",
    ),
    "duplicate-name-from-address": (
        """
        hosts:
          - address: 10.0.0.1
          - address: 10.0.0.1
        """,
        3,
        "hosts[1].name",
        "duplicate host name '10.0.0.1'",
    ),
    "empty-hosts": (
        """
        defaults: {user: alice}
        hosts: []
        """,
        2,
        "hosts",
        "no hosts listed",
    ),
    "missing-hosts": (
        """
        defaults: {user: alice}
        """,
        1,
        "hosts",
        "is required",
    ),
    "hosts-not-list": (
        """
        hosts:
          name: a
        """,
        1,
        "hosts",
        "must be a list",
    ),
    "missing-address": (
        """
        hosts:
          - name: a
            address: 10.0.0.1
          - name: b
            gpus: 2
        """,
        4,
        "hosts[1].address",
        "is required",
    ),
    "name-in-defaults": (
        """
        defaults:
          name: x
        hosts:
          - {address: 10.0.0.1}
        """,
        2,
        "defaults.name",
        "per host",
    ),
    "entry-not-mapping": (
        """
        hosts:
          - name: a
            address: 10.0.0.1
          - [1, 2]
        """,
        4,
        "hosts[1]",
        "must be a mapping",
    ),
    "string-entry-bad-port": (
        """
        hosts:
          - node0:ssh
        """,
        2,
        "hosts[0].port",
        "not a port number",
    ),
}


@pytest.mark.parametrize("case", sorted(YAML_ERRORS))
def test_yaml_errors_name_file_line_and_field(tmp_path: Path, case: str) -> None:
    text, line, field, fragment = YAML_ERRORS[case]
    path = write(tmp_path, text)
    error = error_of(path)
    assert (error.path, error.line, error.field) == (str(path), line, field)
    assert fragment in error.detail
    where = f"{path}:{line}" if line is not None else str(path)
    expected = f"{where}: {field}: {error.detail}" if field else f"{where}: {error.detail}"
    assert str(error) == expected
    assert "\n" not in str(error)


def test_missing_file(tmp_path: Path) -> None:
    error = error_of(tmp_path / "nope.yaml")
    assert str(error) == f"{tmp_path / 'nope.yaml'}: file not found"


def test_empty_file(tmp_path: Path) -> None:
    error = error_of(write(tmp_path, "# nothing here\n"))
    assert (error.line, error.field) == (None, "hosts")
    assert "no hosts" in error.detail


def test_top_level_list_is_refused(tmp_path: Path) -> None:
    error = error_of(write(tmp_path, "- name: a\n  address: b\n"))
    assert error.line == 1
    assert "expected a mapping with a 'hosts' list" in error.detail


def test_yaml_merge_keys_work(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        hosts:
          - &base {name: a, address: 10.0.0.1, user: alice, gpus: 2}
          - <<: *base
            name: b
            port: 99999
        """,
    )
    error = error_of(path)
    assert (error.line, error.field) == (5, "hosts[1].port")
