"""The host's sync helper refuses a manifest that would write through one of the tree's
own symlinks (a link ``a`` -> /elsewhere, then a file ``a/x``): run as the real program."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from console.hostprogs import sync_program

OID = "0" * 64


def run_helper(op: str, root: Path, stdin: str) -> list[dict[str, object]]:
    done = subprocess.run(
        [sys.executable, sync_program.__file__, op, str(root)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_nothing_is_written_through_a_link_of_the_tree(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    manifest = {
        "tree": "t-0123456789abcdef",
        "entries": [["a/x", OID]],
        "links": [["a", str(elsewhere)]],
    }
    answers = run_helper("put", tmp_path / "store", json.dumps(manifest) + "\n.\n")
    assert answers[-1] == {"error": "bad manifest entry 'a/x': under a symlink of the tree"}
    assert list(elsewhere.iterdir()) == []


def test_object_modes() -> None:
    assert sync_program.object_mode(OID) == 0o444
    assert sync_program.object_mode(OID + "x") == 0o555
    assert sync_program.object_mode(OID + "p") == 0o400
    assert sync_program.object_mode(OID + "xp") == 0o500
    assert not sync_program.valid_oid(OID + "px")
