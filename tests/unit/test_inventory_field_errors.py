"""inventory.load() on a hosts.yaml with a wrong field value (ports, env, interface,
names, tags, timeouts, gpus, setup): each error names file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_inventory import error_of, write

# Each case: file text, expected (line, field, message fragment).
YAML_ERRORS = {
    "port-too-big": (
        """
        hosts:
          - name: a
            address: 10.0.0.1
          - name: b
            address: 10.0.0.2
            port: 70000
        """,
        6,
        "hosts[1].port",
        "between 1 and 65535",
    ),
    "port-zero-in-defaults": (
        """
        defaults:
          user: alice
          port: 0
        hosts:
          - {name: a, address: 10.0.0.1}
        """,
        3,
        "defaults.port",
        "between 1 and 65535",
    ),
    "port-bool": (
        """
        hosts:
          - {name: a, address: 10.0.0.1, port: true}
        """,
        2,
        "hosts[0].port",
        "must be a number",
    ),
    "port-not-number": (
        """
        hosts:
          - name: a
            address: 10.0.0.1
            port: ssh
        """,
        4,
        "hosts[0].port",
        "'ssh'",
    ),
    "bad-env-name": (
        """
        defaults:
          env:
            GOOD: 1
        hosts:
          - name: a
            address: 10.0.0.1
            env:
              OK: x
              1BAD: y
        """,
        9,
        "hosts[0].env.1BAD",
        "not a valid environment variable name",
    ),
    "bad-env-name-in-defaults": (
        """
        defaults:
          env:
            "NCCL DEBUG": WARN
        hosts:
          - {name: a, address: 10.0.0.1}
        """,
        3,
        "defaults.env.NCCL DEBUG",
        "not a valid environment variable name",
    ),
    "env-value-list": (
        """
        hosts:
          - name: a
            address: 10.0.0.1
            env:
              PATHS: [a, b]
        """,
        5,
        "hosts[0].env.PATHS",
        "must be a string or a number",
    ),
    "bad-interface": (
        """
        defaults:
          interface: "eth0; rm -rf /"
        hosts:
          - {name: a, address: 10.0.0.1}
        """,
        2,
        "defaults.interface",
        "not a network interface name",
    ),
    "interface-too-long": (
        """
        hosts:
          - name: a
            address: 10.0.0.1
            interface: averyveryverylongname0
        """,
        4,
        "hosts[0].interface",
        "not a network interface name",
    ),
    "name-with-space": (
        """
        hosts:
          - name: node 0
            address: 10.0.0.1
        """,
        2,
        "hosts[0].name",
        "without spaces or shell characters",
    ),
    "name-with-shell-char": (
        """
        hosts:
          - name: "a$(id)"
            address: 10.0.0.1
        """,
        2,
        "hosts[0].name",
        "without spaces or shell characters",
    ),
    "tag-with-shell-char": (
        """
        hosts:
          - name: a
            address: 10.0.0.1
            tags:
              - ok
              - "bad;tag"
        """,
        6,
        "hosts[0].tags[1]",
        "without spaces or shell characters",
    ),
    "address-with-space-named-by-address": (
        """
        hosts:
          - address: "10.0.0.1 10.0.0.2"
        """,
        2,
        "hosts[0].address",
        "not valid",
    ),
    "timeout-zero": (
        """
        defaults:
          connect_timeout: 0
        hosts:
          - {name: a, address: 10.0.0.1}
        """,
        2,
        "defaults.connect_timeout",
        "greater than 0",
    ),
    "gpus-negative": (
        """
        hosts:
          - name: a
            address: 10.0.0.1
            gpus: -1
        """,
        4,
        "hosts[0].gpus",
        "whole number >= 0 or 'auto'",
    ),
    "gpus-word": (
        """
        hosts:
          - name: a
            address: 10.0.0.1
            gpus: all
        """,
        4,
        "hosts[0].gpus",
        "whole number >= 0 or 'auto'",
    ),
    "setup-multi-line": (
        """
        hosts:
          - name: a
            address: 10.0.0.1
            setup: |
              source a
              source b
        """,
        4,
        "hosts[0].setup",
        "one line",
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
