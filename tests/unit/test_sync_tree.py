"""``--sync DIR`` on this machine: which files (git or .gitignore rules), the size guard,
the hash cache, object and tree ids, and what the plan says (no host involved)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from console.errors import JobSpecError
from console.jobs.spec import make_spec
from console.jobs.sync.push import (
    TREE_ID_PLACEHOLDER,
    scan_for_spec,
    spec_in_tree,
    spec_in_unscanned_tree,
)
from console.jobs.sync.tree import HashCache, list_files, parse_size, scan_tree


def make_tree(root: Path) -> Path:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "train.py").write_text("print('hi')\n")
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "run.sh").chmod(0o755)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "model.py").write_text("X = 1\n")
    (root / "pkg" / "model.pyc").write_text("junk")
    (root / "pkg" / "sub" / "keep.log").write_text("kept by the inner !rule\n")
    (root / "pkg" / "sub" / "drop.log").write_text("dropped\n")
    (root / "data" / "big.bin").write_bytes(b"\0" * 4000)
    (root / ".gitignore").write_text("*.pyc\n*.log\ndata/\n")
    (root / "pkg" / "sub" / ".gitignore").write_text("!keep.log\n")
    return root


EXPECTED = [
    ".gitignore",
    "pkg/__init__.py",
    "pkg/model.py",
    "pkg/sub/.gitignore",
    "pkg/sub/keep.log",
    "run.sh",
    "train.py",
]


def test_gitignore_rules_outside_git(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "proj")
    files, lister = list_files(root)
    assert lister == "gitignore"
    assert files == EXPECTED


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_git_work_tree_uses_git_ls_files(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "proj")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    files, lister = list_files(root)
    assert lister == "git"
    assert files == EXPECTED
    # A tracked file stays even when a pattern matches it (git's own rule).
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t")
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    subprocess.run(["git", "-C", str(root), "add", "-f", "pkg/model.pyc"], check=True, env=env)
    assert "pkg/model.pyc" in list_files(root)[0]


def test_scan_ids_and_cache(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "proj")
    cache = HashCache(tmp_path / "cache.json")
    tree = scan_tree(str(root), cache=cache)
    by_path = {e.path: e for e in tree.entries}
    assert by_path["train.py"].oid == hashlib.sha256(b"print('hi')\n").hexdigest()
    assert by_path["run.sh"].oid.endswith("x") and len(by_path["run.sh"].oid) == 65
    assert tree.remote_dir == f"~/.cache/distconsole/sync/trees/proj-{tree.tree_id[:16]}"
    assert tree.lister == "gitignore"
    # Files just written are "racy": hashed again next time, not trusted from the cache.
    assert tree.hashed_bytes == tree.total_bytes
    # Age the files: now their hashes are cached and a second scan reads nothing.
    for entry in tree.entries:
        os.utime(root / entry.path, ns=(1_600_000_000 * 10**9, 1_600_000_000 * 10**9))
    scan_tree(str(root), cache=HashCache(tmp_path / "cache.json"))
    again = scan_tree(str(root), cache=HashCache(tmp_path / "cache.json"))
    assert again.hashed_bytes == 0
    assert again.tree_id == tree.tree_id
    assert json.loads((tmp_path / "cache.json").read_text())
    (root / "pkg" / "model.py").write_text("X = 2\n")
    changed = scan_tree(str(root), cache=HashCache(tmp_path / "cache.json"))
    assert changed.hashed_bytes == len("X = 2\n")
    assert changed.tree_id != tree.tree_id


def test_size_guard_names_the_largest_files(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "proj")
    (root / "weights.pt").write_bytes(b"w" * 3000)
    with pytest.raises(JobSpecError) as info:
        scan_tree(str(root), max_file=2000, cache=HashCache(tmp_path / "c.json"))
    assert info.value.field == "sync"
    assert "weights.pt (3.0 kB)" in str(info.value) and "--sync-max-file" in str(info.value)
    with pytest.raises(JobSpecError) as info:
        scan_tree(str(root), max_total=1000, cache=HashCache(tmp_path / "c.json"))
    assert "largest: weights.pt (3.0 kB)" in str(info.value)
    assert "--sync-max-size" in str(info.value)
    with pytest.raises(JobSpecError, match="not a directory"):
        scan_tree(str(root / "train.py"))


def test_parse_size_and_spec_fields() -> None:
    assert parse_size("2G") == 2 * 10**9
    assert parse_size("500M") == 500 * 10**6
    assert parse_size("1.5kB") == 1500
    assert parse_size("123") == 123
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")
    spec = make_spec(kind="ddp", program="train.py", sync="./proj", sync_max_size="3G")
    assert spec.sync_max_size == 3 * 10**9
    with pytest.raises(JobSpecError) as info:
        make_spec(kind="ddp", program="train.py", sync="p", sync_max_file="big")
    assert info.value.field == "sync_max_file"
    # A relative working directory means "inside the sync"; without --sync it is refused.
    assert make_spec(kind="ddp", program="t.py", sync="p", workdir="src").workdir == "src"
    with pytest.raises(JobSpecError) as info:
        make_spec(kind="ddp", program="t.py", workdir="src")
    assert info.value.field == "workdir" and "--sync" in info.value.detail
    with pytest.raises(JobSpecError, match=r"\.\."):
        make_spec(kind="ddp", program="t.py", sync="p", workdir="../x")


def test_plan_shows_where_the_sync_lives(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "proj")
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(
        "hosts:\n  - name: a\n    address: 10.0.0.1\n  - name: b\n    address: 10.0.0.2\n"
    )
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    result = subprocess.run(
        [sys.executable, "-m", "console", "plan", str(inventory), "--kind", "ddp",
         "--gpus-per-host", "1", "--sync", str(root), "--workdir", "pkg", "--json",
         "--", "model.py"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    remote = data["sync"]["remote_dir"]
    assert remote.startswith("~/.cache/distconsole/sync/trees/proj-")
    assert data["sync"]["files"] == len(EXPECTED)
    assert {ln["cwd"] for ln in data["launches"]} == {remote + "/pkg"}
    (root / "ckpt.pt").write_bytes(b"c" * 2000)
    refused = subprocess.run(
        [sys.executable, "-m", "console", "plan", str(inventory), "--kind", "ddp",
         "--sync", str(root), "--sync-max-file", "1k", "--", "train.py"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith("or raise --sync-max-file"), refused.stderr
    assert "--sync: 1 file(s)" in refused.stderr and "ckpt.pt (2.0 kB)" in refused.stderr
    assert "big.bin" not in refused.stderr  # ignored by data/ in .gitignore


def test_the_unscanned_preview_names_the_tree_the_launch_plans_in(tmp_path: Path) -> None:
    project = tmp_path / "My Project!"
    (project / "src").mkdir(parents=True)
    (project / "src" / "train.py").write_text("print('x')\n")
    for workdir, wanted in (("src", "/src"), (None, ""), ("/abs/dir", None)):
        spec = make_spec(kind="ddp", program="train.py", sync=str(project), workdir=workdir)
        scanned = spec_in_tree(spec, scan_for_spec(spec))
        unscanned = spec_in_unscanned_tree(spec)
        tree = scan_for_spec(spec)
        assert tree is not None
        assert unscanned.workdir is not None and scanned.workdir is not None
        placeholder = unscanned.workdir.replace(TREE_ID_PLACEHOLDER, tree.tree_id[:16])
        assert placeholder == scanned.workdir
        if wanted is not None:
            assert scanned.workdir == tree.remote_dir + wanted
        else:
            assert unscanned.workdir == "/abs/dir"  # an absolute workdir stays as given
    no_sync = make_spec(kind="ddp", program="train.py")
    assert spec_in_unscanned_tree(no_sync) is no_sync
