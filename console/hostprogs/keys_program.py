"""Keys helper the console sends to a host (``python3 -u -c SOURCE OP JSON``).

``key``: makes sure the host has its own key, ``~/.ssh/id_distconsole`` (ed25519, kept
when present), and answers its public half. ``apply``: stdin is what the tool wants in
``~/.ssh`` (authorized_keys and known_hosts lines, the config block); it rewrites only
the lines it owns (those whose last word starts with :data:`MARK`, and the config text
between :data:`BEGIN` and :data:`END`), leaves every other line as it was, and answers
per file what was added and removed. ``dry_run``: answers the same without writing;
``remove``: takes its own lines and block out. Files are replaced atomically with their
modes set (600 for authorized_keys, config and the key, 644 for known_hosts and the
public key, 700 for ~/.ssh); a lock file serialises two runs on one shared home.

Standard library only, Python >= 3.7; opens its output with its versioned hello.
"""

from __future__ import annotations

import difflib
import fcntl
import json
import os
import subprocess
import sys

PROGRAM = "keys"
VERSION = 1
MARK = "distconsole-keys:"
BEGIN = "# >>> distconsole keys: managed by `distconsole keys`, edit outside this block >>>"
END = "# <<< distconsole keys <<<"
KEY_NAME = "id_distconsole"
FILES = {"authorized_keys": 0o600, "known_hosts": 0o644, "config": 0o600}


def say(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def ssh_dir() -> str:
    return os.path.join(os.path.expanduser("~"), ".ssh")


def lock() -> int:
    directory = ssh_dir()
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o700)
    handle = os.open(os.path.join(directory, ".distconsole-keys.lock"), os.O_CREAT | os.O_RDWR)
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def ensure_key(name: str, dry_run: bool) -> dict:
    path = os.path.join(ssh_dir(), KEY_NAME)
    if os.path.isfile(path) and os.path.isfile(path + ".pub"):
        with open(path + ".pub") as handle:
            return {"public_key": handle.read().strip(), "created": False}
    if dry_run:
        return {"public_key": None, "created": True}
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", MARK + name, "-f", path],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    os.chmod(path, 0o600)
    os.chmod(path + ".pub", 0o644)
    with open(path + ".pub") as handle:
        return {"public_key": handle.read().strip(), "created": True}


def owned(line: str) -> bool:
    words = line.split()
    return bool(words) and words[-1].startswith(MARK)


def new_lines(old: list, wanted: list, remove: bool) -> list:
    """The user's lines as they were, then ours (none when removing)."""
    kept = [line for line in old if not owned(line)]
    return kept if remove else kept + list(wanted)


def new_config(old: list, block: list, remove: bool) -> list:
    out: list = []
    inside = False
    at = None
    after_end = False
    for line in old:
        if line.strip() == BEGIN:
            inside = True
            at = len(out) if at is None else at
            continue
        if inside:
            if line.strip() == END:
                inside = False
                after_end = True
            continue
        if after_end and not line.strip():
            after_end = False
            continue  # the blank line written after the block is the block's
        after_end = False
        out.append(line)
    if remove:
        return out
    mine = [BEGIN, *list(block), END]
    if at is None:
        # First: ssh uses the first value it finds, so a broad Host * further down the
        # user's file cannot override the peers' addresses.
        return mine + ([""] if out else []) + out
    return out[:at] + mine + ([""] if out[at:] else []) + out[at:]


def diff_lines(old: list, new: list) -> tuple:
    """(added, removed) by position: a block line equal to one of the user's own lines
    (the user's Host entries for the same peers) is still one the block adds."""
    added: list = []
    removed: list = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            removed += old[i1:i2]
            added += new[j1:j2]
    return added, removed


def write_file(path: str, lines: list, mode: int) -> None:
    temporary = path + ".distconsole-tmp"
    with open(temporary, "w") as handle:
        handle.write("".join(line + "\n" for line in lines))
    os.chmod(temporary, mode)
    os.replace(temporary, path)


def apply(wanted: dict) -> dict:
    directory = ssh_dir()
    dry_run = bool(wanted.get("dry_run"))
    remove = bool(wanted.get("remove"))
    changes = {}
    for name, mode in FILES.items():
        path = os.path.join(directory, name)
        try:
            with open(path) as handle:
                old = handle.read().splitlines()
        except FileNotFoundError:
            old = []
        if name == "config":
            new = new_config(old, wanted.get("config", []), remove)
        else:
            new = new_lines(old, wanted.get(name, []), remove)
        added, removed = diff_lines(old, new)
        changed = new != old
        if changed and not dry_run:
            os.chmod(directory, 0o700)
            write_file(path, new, mode)
        changes[name] = {"path": path, "changed": changed, "added": added, "removed": removed}
    return changes


def main() -> None:
    say({"program": PROGRAM, "v": VERSION})
    if len(sys.argv) != 3 or sys.argv[1] not in ("key", "apply"):
        say({"error": "usage: keys_program.py key|apply JSON"})
        sys.exit(1)
    args = json.loads(sys.argv[2])
    try:
        wanted = json.loads(sys.stdin.read()) if sys.argv[1] == "apply" else {}
        dry_run = bool(args.get("dry_run") or wanted.get("dry_run"))
        handle = None if dry_run else lock()  # a dry run leaves ~/.ssh exactly as it was
        try:
            if sys.argv[1] == "key":
                say(ensure_key(args["name"], dry_run))
            else:
                say({"files": apply(wanted)})
        finally:
            if handle is not None:
                os.close(handle)
    except (OSError, ValueError, subprocess.CalledProcessError) as exc:
        say({"error": str(exc)})
        sys.exit(1)


if __name__ == "__main__":
    main()
