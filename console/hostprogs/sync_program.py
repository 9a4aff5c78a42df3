"""Sync helper the console sends to a host (``python3 -u -c SOURCE OP ROOT``).

It keeps a content-addressed object store under ROOT (``objects/ab/cdef...``, one file
per content, read-only, so a program writing into a synced file fails instead of
changing every tree that shares it) and materialises each synced tree as hard links
into ``trees/NAME-ID`` (a copy where a link fails). A tree is built in a temporary
directory and renamed into place, so a job never sees half a tree.

``check``: stdin is the manifest ``{"tree": NAME-ID, "entries": [[path, oid], ...],
"links": [[path, target], ...]}`` (a symlink is made as one, its target as given: the
console never follows one); an object id ending in ``p`` is its owner's alone (0400);
answers whether the tree is ready (every entry the object it should be) and which
objects are missing. ``put``: stdin is the manifest on one line, then each object as
``OID SIZE`` and its bytes in base64 lines (at most :data:`LINE_RAW` bytes per line),
then ``.``; it stores them (checking each hash), answers ``{"stored": OID}`` per object,
then builds the tree and answers ``{"tree": PATH, ...}``.
``gc``: stdin is ``{"keep": N, "dry_run": bool, "names": [NAME...] or null}``; keeps each
name's N most recently synced trees (a ``check`` that finds a tree ready touches it, so
reuse counts as a sync) and every tree a process of this user works in
(``/proc/PID/cwd``), removes the other trees (of ``names`` only, when given), then every
object no tree links to any more (hard-link count 1) unless it was stored within the
last hour (a sync running now may be about to link it), and answers what it removed and
freed (with ``dry_run``: what it would).

Standard library only, Python >= 3.7; opens its output with its versioned hello.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import sys
import time
from typing import BinaryIO

PROGRAM = "sync"
VERSION = 1
LINE_RAW = 3 * (1 << 18)  # raw bytes per base64 line (768 KiB -> 1 MiB of text)
EXEC_SUFFIX = "x"  # an object id ending in x is stored executable
PRIVATE_SUFFIX = "p"  # ... in p (after any x): readable by its owner alone
SUFFIXES = ("", EXEC_SUFFIX, PRIVATE_SUFFIX, EXEC_SUFFIX + PRIVATE_SUFFIX)
HASH_LEN = 64


def say(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def fail(message: str) -> None:
    say({"error": message})
    sys.exit(1)


def valid_oid(oid: str) -> bool:
    digest = oid[:HASH_LEN]
    rest = oid[HASH_LEN:]
    return (
        len(digest) == HASH_LEN
        and all(c in "0123456789abcdef" for c in digest)
        and rest in SUFFIXES
    )


def object_mode(oid: str) -> int:
    mode = 0o555 if oid.rstrip(PRIVATE_SUFFIX).endswith(EXEC_SUFFIX) else 0o444
    return mode & 0o700 if oid.endswith(PRIVATE_SUFFIX) else mode


def object_path(root: str, oid: str) -> str:
    return os.path.join(root, "objects", oid[:2], oid[2:])


def safe_relative(path: str) -> bool:
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and all(p not in ("", ".", "..") for p in parts)


def read_manifest(text: str) -> dict:
    manifest = json.loads(text)
    tree = manifest.get("tree", "")
    if not tree or "/" in tree or tree.startswith("."):
        fail(f"bad tree name {tree!r}")
    for path, oid in manifest.get("entries", []):
        if not safe_relative(path) or not valid_oid(oid):
            fail(f"bad manifest entry {path!r} -> {oid!r}")
    links = manifest.setdefault("links", [])
    for path, target in links:
        if not safe_relative(path) or not target or "\0" in target:
            fail(f"bad manifest link {path!r} -> {target!r}")
    # Nothing is made through a link: no path may lie under a link's path.
    linked = {path for path, _target in links}
    for path, _rest in manifest["entries"] + links:
        parts = path.split("/")
        if any("/".join(parts[:i]) in linked for i in range(1, len(parts))):
            fail(f"bad manifest entry {path!r}: under a symlink of the tree")
    return manifest


def tree_ready(root: str, manifest: dict) -> bool:
    """Every entry is there and is its object (same inode, or for a copy, same size)."""
    tree = os.path.join(root, "trees", manifest["tree"])
    if not os.path.isdir(tree):
        return False
    for path, oid in manifest["entries"]:
        try:
            have = os.lstat(os.path.join(tree, path))
            want = os.stat(object_path(root, oid))
        except OSError:
            return False
        if have.st_ino != want.st_ino and have.st_size != want.st_size:
            return False
    for path, target in manifest["links"]:
        try:
            if os.readlink(os.path.join(tree, path)) != target:
                return False
        except OSError:
            return False
    return True


def check(root: str) -> None:
    manifest = read_manifest(sys.stdin.read())
    ready = tree_ready(root, manifest)
    missing = []
    if not ready:
        seen = set()
        for _path, oid in manifest["entries"]:
            if oid not in seen and not os.path.isfile(object_path(root, oid)):
                missing.append(oid)
            seen.add(oid)
    tree = os.path.join(root, "trees", manifest["tree"])
    if ready:
        os.utime(tree)  # a reuse is a sync: gc keeps the most recently synced trees
    say({"ready": ready, "missing": missing, "tree": tree})


def store_object(root: str, oid: str, size: int, stream: BinaryIO) -> None:
    final = object_path(root, oid)
    directory = os.path.dirname(final)
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, f".tmp-{oid[2:]}-{os.getpid()}")
    digest = hashlib.sha256()
    got = 0
    with open(temporary, "wb") as out:
        while got < size:
            line = stream.readline()
            if not line:
                fail(f"the stream ended inside object {oid}")
            data = base64.b64decode(line)
            digest.update(data)
            out.write(data)
            got += len(data)
    if got != size or digest.hexdigest() != oid[:HASH_LEN]:
        os.unlink(temporary)
        fail(f"object {oid} arrived damaged ({got} of {size} bytes, hash differs)")
    os.chmod(temporary, object_mode(oid))
    os.replace(temporary, final)


def materialise(root: str, manifest: dict) -> dict:
    trees = os.path.join(root, "trees")
    os.makedirs(trees, exist_ok=True)
    final = os.path.join(trees, manifest["tree"])
    temporary = os.path.join(trees, ".tmp-{}-{}".format(manifest["tree"], os.getpid()))
    shutil.rmtree(temporary, ignore_errors=True)
    os.makedirs(temporary)
    linked = copied = 0
    for path, oid in manifest["entries"]:
        target = os.path.join(temporary, path)
        parent = os.path.dirname(target)
        if not os.path.isdir(parent):
            os.makedirs(parent)
        source = object_path(root, oid)
        try:
            os.link(source, target)
            linked += 1
        except OSError:  # another filesystem, too many links: a copy instead
            shutil.copy2(source, target)
            copied += 1
    for path, link_target in manifest["links"]:
        target = os.path.join(temporary, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.symlink(link_target, target)
    if os.path.isdir(final):
        # There but not ready (a file was removed or replaced): swap in the new one.
        old = os.path.join(trees, ".old-{}-{}".format(manifest["tree"], os.getpid()))
        os.rename(final, old)
        os.rename(temporary, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        try:
            os.rename(temporary, final)
        except OSError:
            if not os.path.isdir(final):
                raise
            shutil.rmtree(temporary, ignore_errors=True)  # another sync built it meanwhile
    return {
        "tree": final,
        "files": len(manifest["entries"]),
        "linked": linked,
        "copied": copied,
        "links": len(manifest["links"]),
    }


def put(root: str) -> None:
    stream = sys.stdin.buffer
    manifest = read_manifest(stream.readline().decode())
    while True:
        header = stream.readline().decode().strip()
        if header in (".", ""):
            break
        oid, size = header.split(" ")
        if not valid_oid(oid):
            fail(f"bad object id {oid!r}")
        store_object(root, oid, int(size), stream)
        say({"stored": oid})
    say(materialise(root, manifest))


TREE_ID_LEN = 16  # trees are NAME-ID, ID the first 16 hex digits of the tree's hash
STALE_TMP_S = 3600  # a .tmp-/.old- left this long ago is from a sync that died
MIN_OBJECT_AGE_S = 3600  # a younger unlinked object may be about to be linked by a sync


def tree_name(entry: str) -> str:
    """NAME of a ``NAME-ID`` tree directory (the whole entry if it is not one)."""
    name, dash, tree_id = entry.rpartition("-")
    ok = dash and len(tree_id) == TREE_ID_LEN and all(c in "0123456789abcdef" for c in tree_id)
    return name if ok else entry


def cwds_in(trees: str) -> set[str]:
    """The trees some process of this user works in (``/proc/PID/cwd`` under ``trees``)."""
    busy: set[str] = set()
    prefix = os.path.realpath(trees) + os.sep
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return busy
    for pid in pids:
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue  # another user's, or gone
        if cwd.startswith(prefix):
            busy.add(cwd[len(prefix) :].split(os.sep, 1)[0])
    return busy


def tree_files(path: str) -> list[os.stat_result]:
    found = []
    for directory, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                found.append(os.lstat(os.path.join(directory, name)))
    return found


def gc(root: str) -> None:
    request = json.loads(sys.stdin.read() or "{}")
    keep = int(request.get("keep", 3))
    dry_run = bool(request.get("dry_run", False))
    names = request.get("names")
    if keep < 0:
        fail(f"keep must be >= 0, got {keep}")
    trees = os.path.join(root, "trees")
    objects = os.path.join(root, "objects")
    now = time.time()
    by_name: dict[str, list[tuple[float, str]]] = {}  # NAME -> [(mtime, entry)]
    stale: list[str] = []
    entries = os.listdir(trees) if os.path.isdir(trees) else []
    for entry in entries:
        path = os.path.join(trees, entry)
        mtime = os.lstat(path).st_mtime
        if entry.startswith("."):
            if now - mtime > STALE_TMP_S:
                stale.append(entry)
            continue
        name = tree_name(entry)
        if names is None or name in names:
            by_name.setdefault(name, []).append((mtime, entry))
    busy = cwds_in(trees)
    doomed = list(stale)
    kept: list[str] = []
    for _name, found in sorted(by_name.items()):
        found.sort(reverse=True)
        for index, (_mtime, entry) in enumerate(found):
            (kept if index < keep or entry in busy else doomed).append(entry)
    # Links the doomed trees hold, per inode: an object whose other links are all in
    # them is freed with them (counted before removing, so a dry run says the same).
    held: dict[int, int] = {}
    freed = 0
    for entry in doomed:
        for st in tree_files(os.path.join(trees, entry)):
            held[st.st_ino] = held.get(st.st_ino, 0) + 1
            if st.st_nlink == 1:
                freed += st.st_size  # a copy (the link failed): freed with its tree
    removed_objects = 0
    doomed_objects: list[str] = []
    if os.path.isdir(objects):
        for directory, _dirs, files in os.walk(objects):
            for name in files:
                path = os.path.join(directory, name)
                st = os.lstat(path)
                if name.startswith(".tmp-"):
                    if now - st.st_mtime > STALE_TMP_S:
                        doomed_objects.append(path)
                        freed += st.st_size
                    continue
                young = now - st.st_mtime < MIN_OBJECT_AGE_S
                if not young and st.st_nlink - held.get(st.st_ino, 0) <= 1:
                    doomed_objects.append(path)
                    freed += st.st_size
                    removed_objects += 1
    if not dry_run:
        for entry in doomed:
            shutil.rmtree(os.path.join(trees, entry), ignore_errors=True)
        for path in doomed_objects:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    say(
        {
            "removed": sorted(e for e in doomed if not e.startswith(".")),
            "kept": sorted(kept),
            "busy": sorted(busy & set(kept)),
            "stale": len(stale),
            "objects": removed_objects,
            "bytes": freed,
            "dry_run": dry_run,
        }
    )


def main() -> None:
    say({"program": PROGRAM, "v": VERSION})
    if len(sys.argv) != 3 or sys.argv[1] not in ("check", "put", "gc"):
        fail("usage: sync_program.py check|put|gc ROOT")
    root = os.path.expanduser(sys.argv[2])
    try:
        if sys.argv[1] == "check":
            check(root)
        elif sys.argv[1] == "gc":
            gc(root)
        else:
            put(root)
    except OSError as exc:
        fail("{}: {}".format(getattr(exc, "filename", None) or root, exc.strerror or exc))


if __name__ == "__main__":
    main()
