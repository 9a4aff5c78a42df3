"""Secrets stay out of command lines (issue 29 item 5), on real sshd hosts.

A PS job gets one secret by ``--env NAME`` (the console's own value), one by
``--env-file``, a webhook whose path is its secret, and a notify command holding a
token that sleeps after it ran. While the job's processes and that command run,
another Unix account (``nobody``) reads every ``/proc/*/cmdline`` on the machine, every
host's processes included: no secret. The report bundle and the job directory of the
host that is not the leader hold no webhook secret and no notify token, and the bundle
holds no --env / --env-file value (the names, masked).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.jobs.report.env_masking import MASKED
from tests.integration.test_jobs_cli import CLI, TIMEOUT_S, cli_env
from tests.integration.test_notify import SECRET as WEBHOOK_SECRET
from tests.integration.test_notify import Receiver
from tests.integration.test_supervisor import job_dir, wait_for

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

OWN_SECRET = "own-Zq81-console-value"
FILE_SECRET = "file-Kx27-env-file-value"
NOTIFY_SECRET = "notify-Wb55-command-token"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# worker-1 fails its first run (the restart is the notify command's event); every
# process says whether both secrets reached it and whether its job directory is a
# directory there, then loops until stopped.
# Digests, not the secrets: the program's own argv must not hold them either.
PROGRAM = (
    "import hashlib, os, sys, time; "
    "me = os.environ['DISTCONSOLE_TASK_TYPE'] + '-' + os.environ['DISTCONSOLE_TASK_INDEX']; "
    "digest = lambda name: hashlib.sha256(os.environ.get(name, '').encode()).hexdigest(); "
    f"ok = (digest('OWN_TOKEN') == {sha(OWN_SECRET)!r}, "
    f"digest('FILE_TOKEN') == {sha(FILE_SECRET)!r}, "
    "os.path.isdir(os.environ['DISTCONSOLE_JOB_DIR'])); "
    "print('secrets', me, ok, flush=True); "
    "sys.exit(3) if me == 'worker-1' and os.environ['DISTCONSOLE_RESTART_COUNT'] == '0' "
    "else None; "
    "[time.sleep(0.2) for _ in iter(int, 1)]"
)
# The shell waits for the sleep (a last command alone would replace it): the scan finds
# the shell running.
NOTIFY_COMMAND = (
    f'token={NOTIFY_SECRET}; echo "$DISTCONSOLE_EVENT" >> notified.txt; sleep 20; echo done'
)

# Run as nobody: every process's argv on the machine that carries one of the secrets
# (given on stdin, and its own pid skipped: in its own argv the scan would find itself).
SCAN = """
import json, os, sys
secrets = [s.encode() for s in sys.stdin.read().split()]
found, seen = [], 0
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read()
    except OSError:
        continue
    seen += 1
    if b"notify-command" in argv:
        found.append(["the notify command runs", pid])
    for secret in secrets:
        if secret in argv:
            found.append([secret.decode(), pid, argv.decode("utf-8", "replace")])
print(json.dumps({"uid": os.getuid(), "seen": seen, "found": found}))
"""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.close()


def dc(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(cli_env(tmp_path), **extra)
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def scan_as_nobody(
    secrets: tuple[str, ...] = (OWN_SECRET, FILE_SECRET, NOTIFY_SECRET, WEBHOOK_SECRET),
) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", SCAN],
        input=" ".join(secrets),
        user="nobody",
        group="nogroup",
        extra_groups=[],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    found: dict[str, object] = json.loads(out.stdout)
    return found


def files_holding(root: Path, *secrets: str) -> list[str]:
    """Every file under ``root`` (as ``grep -r`` reads them) that holds one of ``secrets``."""
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            hits += [f"{path}: {s}" for s in secrets if s.encode() in data]
    return hits


def test_no_secret_in_any_argv_nor_a_webhook_secret_in_a_bundle_or_on_a_follower(
    sshd_cluster, tmp_path: Path, receiver: Receiver
) -> None:
    cluster = sshd_cluster(n=2)
    inv = str(cluster.inventory_path)
    env_file = tmp_path / "secrets.env"
    env_file.write_text(f"# for the job\n\nexport FILE_TOKEN='{FILE_SECRET}'\n")
    launched = dc(
        tmp_path, "launch", inv, "--kind", "ps", "--ps", "1", "--workers", "2",
        "--skip-preflight", "--detach", "--max-restarts", "1",
        "--env", "OWN_TOKEN", "--env-file", str(env_file),
        "--notify", receiver.url, "--notify-command", NOTIFY_COMMAND,
        "--notify-on", "restarted", "--", "python3", "-c", PROGRAM,
        OWN_TOKEN=OWN_SECRET,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    job_id = launched.stdout.strip()
    leader = job_dir(cluster, "node0", job_id)
    follower = job_dir(cluster, "node1", job_id)
    wait_for(lambda: (leader / "notified.txt").exists(), timeout=90)
    # The notify command sleeps now (20 s), and every process of the job runs.
    scans = [scan_as_nobody() for _ in range(3)]
    running = [hit for hit in scans[0]["found"] if hit[0] == "the notify command runs"]  # type: ignore[union-attr]
    assert running, scans[0]  # the first scan, seconds after the command began, saw it
    for scan in scans:
        assert scan["uid"] != 0 and scan["uid"] not in {h.uid for h in cluster.hosts}
        assert int(str(scan["seen"])) > 10, scan  # it read the other users' processes
        secrets = [hit for hit in scan["found"] if hit[0] != "the notify command runs"]  # type: ignore[union-attr]
        assert secrets == [], secrets

    # Each process got both secrets (through its wrapper, a 0600 file) and its own
    # job directory as a real path: ps-0, worker-0, and worker-1 twice (its restart).
    def said() -> list[str]:
        outs = [*leader.glob("*.out"), *follower.glob("*.out")]
        return [ln for p in outs for ln in p.read_text().splitlines() if ln.startswith("secrets")]

    wait_for(lambda: len(said()) >= 4, timeout=60)
    assert all(ln.endswith("(True, True, True)") for ln in said()), said()
    wait_for(lambda: len(receiver.posts) == 1, timeout=60)

    stopped = dc(tmp_path, "stop", inv, job_id)
    assert stopped.returncode == 0, stopped.stderr
    out = tmp_path / "report"
    made = dc(tmp_path, "report", inv, job_id, "--out", str(out))
    assert made.returncode == 0, made.stderr
    assert (out / "hosts" / "node0" / "supervisor-config.json").exists()
    assert list((out / "hosts" / "node1").glob("job.json"))
    # Nor the --env / --env-file values: the wrappers keep the names, masked.
    assert files_holding(out, WEBHOOK_SECRET, NOTIFY_SECRET, OWN_SECRET, FILE_SECRET) == []
    wrappers = [p.read_text() for p in out.glob("hosts/*/*-*.sh")]
    assert len(wrappers) == 3, wrappers  # ps-0, worker-0, worker-1
    for wrapper in wrappers:
        assert (
            f"export OWN_TOKEN='{MASKED}'" in wrapper and f"export FILE_TOKEN='{MASKED}'" in wrapper
        )
    # The host that is not the leader never got the webhook nor the command.
    assert files_holding(follower, WEBHOOK_SECRET, NOTIFY_SECRET) == []
    config = json.loads((out / "hosts" / "node0" / "supervisor-config.json").read_text())
    assert config["notify"]["urls"] == [receiver.url.split("/services/")[0] + "/…"]
    assert os.stat(leader / "notify-command.secret").st_mode & 0o077 == 0
