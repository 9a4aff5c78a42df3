"""``--sync DIR`` on this machine: which files, their content hashes, the tree's id.

Which files: in a git work tree, ``git ls-files --cached --others --exclude-standard``
(what git itself calls the project: tracked files even when a pattern matches them,
untracked files unless ignored, ``.git/info/exclude`` and the user's global excludes);
elsewhere every ``.gitignore`` in the tree read with ``pathspec``'s gitignore rules. The
size guard runs on the listing's sizes, before anything is read.

Hashes are sha256, streamed, and cached by (path, size, mtime_ns) in
``sync-hashes.json`` under the user's cache directory, so an unchanged tree is stat'ed,
not read. An object id is the hash plus ``x`` for an executable file and ``p`` for a
private one (neither group nor others may read it): the host stores objects read-only
with their mode (``p``: its owner's alone), and a hard link shares its mode. A symlink
is synced as a symlink with its target as written (as git and ``rsync -a`` do); it is
never followed, so nothing outside the tree travels. The tree id hashes the sorted
(path, object) list and the links: the same content is the same directory on every
host, ``~/.cache/distconsole/sync/trees/NAME-ID``, reused by every launch of it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pathspec
import platformdirs

from console.errors import JobSpecError
from console.hostprogs.sync_program import EXEC_SUFFIX, PRIVATE_SUFFIX
from console.names import path_stem

REMOTE_ROOT = "~/.cache/distconsole/sync"
DEFAULT_MAX_TOTAL = 2 * 1000**3
DEFAULT_MAX_FILE = 500 * 1000**2
READ_BYTES = 1 << 20
# A file changed within this many seconds of its hash may change again in the same
# mtime tick: its hash is not cached (git's "racy" entries).
RACY_S = 2.0
SIZE_UNITS = {"": 1, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4}

Lister = Literal["git", "gitignore"]


@dataclass(frozen=True, slots=True)
class SyncEntry:
    path: str  # relative, with "/"
    oid: str
    size: int


@dataclass(frozen=True, slots=True)
class SyncLink:
    path: str  # relative, with "/"
    target: str  # as the link holds it: never resolved here


@dataclass(frozen=True, slots=True)
class SyncTree:
    source: str  # the local directory, absolute
    name: str
    tree_id: str
    entries: tuple[SyncEntry, ...]
    lister: Lister
    hashed_bytes: int  # read this time (the rest came from the hash cache)
    links: tuple[SyncLink, ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries)

    @property
    def remote_dir(self) -> str:
        """Where the tree lives on every host (``~/`` expands there)."""
        return f"{REMOTE_ROOT}/trees/{self.dir_name}"

    @property
    def dir_name(self) -> str:
        return f"{self.name}-{self.tree_id[:16]}"

    def manifest(self) -> dict[str, object]:
        return {
            "tree": self.dir_name,
            "entries": [[e.path, e.oid] for e in self.entries],
            "links": [[link.path, link.target] for link in self.links],
        }

    def describe(self) -> str:
        return (
            f"{self.source} ({len(self.entries)} files, {size_text(self.total_bytes)}, "
            f"{'git ls-files' if self.lister == 'git' else '.gitignore'} rules) -> "
            f"{self.remote_dir}"
        )


def size_text(value: int) -> str:
    """Decimal units, as the limits are given (``2.1 GB``, ``512.0 MB``)."""
    for unit, factor in (("TB", 1000**4), ("GB", 1000**3), ("MB", 1000**2), ("kB", 1000)):
        if value >= factor:
            return f"{value / factor:.1f} {unit}"
    return f"{value} B"


def parse_size(text: str | int) -> int:
    """``"2G"``, ``"500M"``, ``"1500000"`` -> bytes (decimal units); ValueError otherwise."""
    if isinstance(text, int):
        value = text
    else:
        raw = text.strip().upper().removesuffix("B")
        unit = raw[-1:] if raw[-1:] in SIZE_UNITS and not raw[-1:].isdigit() else ""
        number = raw[: len(raw) - len(unit)]
        try:
            value = int(float(number) * SIZE_UNITS[unit])
        except ValueError:
            raise ValueError(f"{text!r} is not a size (e.g. 2G, 500M)") from None
    if value <= 0:
        raise ValueError(f"must be a positive size, got {text!r}")
    return value


def list_files(root: Path) -> tuple[list[str], Lister]:
    """Relative paths of the files to sync (see the module doc for which rules)."""
    git = _git_files(root)
    if git is not None:
        return git, "git"
    return _gitignore_files(root), "gitignore"


def _git_files(root: Path) -> list[str] | None:
    try:
        inside = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--is-inside-work-tree"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return None
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    if listed.returncode != 0:
        return None
    names = dict.fromkeys(p for p in listed.stdout.decode("utf-8", "surrogateescape").split("\0"))
    return sorted(n for n in names if n and _file_or_link(root / n))


def _gitignore_files(root: Path) -> list[str]:
    found: list[str] = []
    # (directory relative to root, its spec), innermost last: a file is ignored when the
    # deepest .gitignore with a matching rule says so (gitignore's own precedence).
    specs: list[tuple[str, pathspec.GitIgnoreSpec]] = []
    for directory, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(directory, root).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir
        specs = [(d, s) for d, s in specs if rel_dir == d or rel_dir.startswith(d + "/") or not d]
        ignore_file = Path(directory) / ".gitignore"
        if ignore_file.is_file():
            lines = ignore_file.read_text(errors="replace").splitlines()
            specs.append((rel_dir, pathspec.GitIgnoreSpec.from_lines(lines)))
        # A link to a folder is synced as a link: os.walk does not enter it.
        linked = [d for d in dirs if os.path.islink(os.path.join(directory, d))]
        dirs[:] = sorted(
            d
            for d in dirs
            if d != ".git" and d not in linked and not _ignored(specs, _join(rel_dir, d) + "/")
        )
        found += [
            _join(rel_dir, f)
            for f in sorted([*files, *linked])
            if not _ignored(specs, _join(rel_dir, f))
        ]
    return sorted(p for p in found if _file_or_link(root / p))


def _file_or_link(path: Path) -> bool:
    """A regular file or a symlink (whatever it points at: it is never followed)."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) or stat.S_ISLNK(mode)


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


def _ignored(specs: Iterable[tuple[str, pathspec.GitIgnoreSpec]], path: str) -> bool:
    verdict = False
    for directory, spec in specs:
        inner = path[len(directory) + 1 :] if directory else path
        result = spec.check_file(inner)
        if result.include is not None:
            verdict = bool(result.include)
    return verdict


def check_size(root: Path, sizes: dict[str, int], *, max_total: int, max_file: int) -> None:
    """The size guard, naming the largest files; JobSpecError on ``sync``."""
    total = sum(sizes.values())
    biggest = sorted(sizes.items(), key=lambda item: -item[1])
    largest = ", ".join(f"{p} ({size_text(s)})" for p, s in biggest[:5])
    too_big = [(p, s) for p, s in biggest if s > max_file]
    if too_big:
        raise JobSpecError(
            "sync",
            f"{len(too_big)} file(s) in {root} are over the {size_text(max_file)} per-file "
            f"limit: {', '.join(f'{p} ({size_text(s)})' for p, s in too_big[:5])}; "
            "add them to .gitignore or raise --sync-max-file",
        )
    if total > max_total:
        raise JobSpecError(
            "sync",
            f"{root} holds {size_text(total)} in {len(sizes)} files, over the "
            f"{size_text(max_total)} limit; largest: {largest}; add them to .gitignore "
            "or raise --sync-max-size",
        )


class HashCache:
    """sha256 by (path, size, mtime_ns), kept in one JSON file between runs."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or Path(platformdirs.user_cache_dir("distconsole")) / "sync-hashes.json"
        self.entries: dict[str, list[object]] = {}
        with contextlib.suppress(OSError, ValueError):
            loaded = json.loads(self.path.read_text())
            if isinstance(loaded, dict):
                self.entries = loaded
        self.changed = False
        self.hashed_bytes = 0

    def digest(self, path: Path, st: os.stat_result) -> str:
        key = str(path)
        cached = self.entries.get(key)
        if cached is not None and cached[:2] == [st.st_size, st.st_mtime_ns]:
            return str(cached[2])
        sha = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(READ_BYTES):
                sha.update(chunk)
        self.hashed_bytes += st.st_size
        digest = sha.hexdigest()
        if time.time_ns() - st.st_mtime_ns > RACY_S * 1e9:
            self.entries[key] = [st.st_size, st.st_mtime_ns, digest]
            self.changed = True
        return digest

    def save(self) -> None:
        if not self.changed:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(f".tmp{os.getpid()}")
        temporary.write_text(json.dumps(self.entries, separators=(",", ":")))
        os.replace(temporary, self.path)


def scan_tree(
    source: str,
    *,
    max_total: int = DEFAULT_MAX_TOTAL,
    max_file: int = DEFAULT_MAX_FILE,
    cache: HashCache | None = None,
) -> SyncTree:
    """List, guard and hash ``source``; JobSpecError on ``sync`` for a bad directory."""
    root = Path(source).expanduser().resolve()
    if not root.is_dir():
        raise JobSpecError("sync", f"{source} is not a directory on this machine")
    paths, lister = list_files(root)
    stats = {p: (root / p).lstat() for p in paths}
    links = tuple(
        SyncLink(p, os.readlink(root / p)) for p, st in stats.items() if stat.S_ISLNK(st.st_mode)
    )
    stats = {p: st for p, st in stats.items() if not stat.S_ISLNK(st.st_mode)}
    check_size(
        root, {p: s.st_size for p, s in stats.items()}, max_total=max_total, max_file=max_file
    )
    cache = cache or HashCache()
    entries = []
    for rel, st in stats.items():
        oid = cache.digest(root / rel, st)
        if st.st_mode & stat.S_IXUSR:
            oid += EXEC_SUFFIX
        if not st.st_mode & (stat.S_IRGRP | stat.S_IROTH):
            oid += PRIVATE_SUFFIX  # its owner's alone here: so on the hosts
        entries.append(SyncEntry(rel, oid, st.st_size))
    cache.save()
    listing = "".join(f"{e.path}\0{e.oid}\n" for e in entries)
    listing += "".join(f"{link.path}\0@{link.target}\n" for link in links)
    tree_id = hashlib.sha256(listing.encode("utf-8", "surrogateescape")).hexdigest()
    return SyncTree(
        source=str(root),
        name=path_stem(root.name, limit=40),
        tree_id=tree_id,
        entries=tuple(entries),
        lister=lister,
        hashed_bytes=cache.hashed_bytes,
        links=links,
    )
