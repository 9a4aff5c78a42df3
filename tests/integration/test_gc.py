"""Issue 23 item 7: ``distconsole gc`` on real sshd hosts with their own users. An ended
job's directory and its Ray temp dir go once older than ``--older-than``, unless
``--keep`` keeps it; a running job stays however old its files; ``--dry-run`` removes
nothing; ``--json`` says the same; ``gc --sync`` is the sync stores' gc (``sync-gc``);
a bad duration is refused naming the option."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from sshd_cluster import SshdCluster, SshdHost

from console.jobs.plan.ray import TEMP_LINK, private_dir, temp_dir
from tests.integration.test_jobs_cli import dc, jobs_json

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

JOBS = "distconsole/.distconsole/jobs"


def job_dir(host: SshdHost, job_id: str) -> Path:
    return host.home / JOBS / job_id


def age(path: Path, days: float) -> None:
    """Everything in ``path`` last written ``days`` ago."""
    then = time.time() - days * 86400
    for item in [path, *path.rglob("*")]:
        os.utime(item, (then, then), follow_symlinks=False)


def ray_temp(host: SshdHost, job_id: str) -> Path:
    """What a Ray job leaves on ``host``: its temp dir in /tmp, linked from the job dir."""
    own = Path(private_dir(job_id, host.name))
    (own / "t" / "session_latest" / "logs").mkdir(parents=True, exist_ok=True)
    (own / "t" / "session_latest" / "logs" / "raylet.out").write_text("x" * 5000)
    for item in [own, *own.rglob("*")]:
        os.chown(item, host.uid, host.gid)
    link = job_dir(host, job_id) / TEMP_LINK
    link.symlink_to(temp_dir(job_id, host.name))
    os.chown(link, host.uid, host.gid, follow_symlinks=False)
    return own


def gc(tmp_path: Path, inv: str, *args: str) -> str:
    done = dc(tmp_path, "gc", inv, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_gc_removes_ended_jobs_and_their_ray_dirs_never_running_ones(
    sshd_cluster: SshdCluster, tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    inv = str(cluster.inventory_path)
    # gc reads no kind: a PS job (standard library, no torch to import) ends here, on both
    # hosts, in a fraction of a DDP job's time.
    ended = dc(
        tmp_path, "launch", inv, "--kind", "ps", "--ps", "1", "--workers", "1", "--name",
        "gcdone", "--", "example:ps", "--steps", "1",
    )  # fmt: skip
    assert ended.returncode == 0, ended.stderr
    running = dc(
        tmp_path, "launch", inv, "--kind", "ps", "--ps", "1", "--workers", "1", "--detach",
        "--name", "gcrun", "--", "example:ps", "--steps", "100000", "--sleep", "0.05",
    )  # fmt: skip
    assert running.returncode == 0, running.stderr
    live = running.stdout.strip()
    done = next(j["id"] for j in jobs_json(tmp_path, cluster.inventory_path) if j["id"] != live)
    rays: dict[str, Path] = {}
    try:
        rays.update({h.name: ray_temp(h, done) for h in cluster.hosts})
        node0, node1 = cluster.hosts
        starting = job_dir(node0, "starting-20260101-000000-abcdef")  # no process yet
        starting.mkdir()
        os.chown(starting, node0.uid, node0.gid)

        dry = gc(tmp_path, inv, "--older-than", "0s", "--dry-run")
        assert "  running starting-20260101-000000-abcdef: no process recorded yet" in dry
        shutil.rmtree(starting)
        dry = gc(tmp_path, inv, "--older-than", "0s", "--dry-run")
        for host in cluster.hosts:
            assert re.search(
                # Ray temp dirs: this job's, and any that earlier runs left for this user
                rf"^{host.name}: would free [\d.]+ \w*B: 1 job\(s\) and \d+ Ray temp dir\(s\); "
                r"kept 1 running$",
                dry,
                re.M,
            ), dry
            assert f"  would remove {done} and {rays[host.name]} (" in dry
            assert job_dir(host, done).is_dir() and rays[host.name].is_dir()
        assert re.search(rf"^  running {live}: process \d+ runs for it$", dry, re.M), dry

        # Just ended: younger than the default 30 days, and --keep 1 keeps the last one.
        # (and Ray temp dirs that earlier runs left for these users, of no job here)
        left = r"0 job\(s\)(?: and \d+ Ray temp dir\(s\))?; kept 1 running, "
        assert len(re.findall(left + "1 recent$", gc(tmp_path, inv), re.M)) == 2
        keep_one = gc(tmp_path, inv, "--older-than", "0s", "--keep", "1")
        assert len(re.findall(left + "1 by --keep$", keep_one, re.M)) == 2, keep_one

        for host in cluster.hosts:
            age(job_dir(host, done), 2)
            age(job_dir(host, live), 40)  # old files, live processes: it stays
        # A Ray temp dir whose job directory is gone (removed from a shared home by
        # another host's gc): it goes too.
        orphan = Path(private_dir("gone-20260101-000000-abcdef", node1.name))
        rays["orphan"] = orphan
        orphan.mkdir()
        os.chown(orphan, node1.uid, node1.gid)
        age(orphan, 2)
        report = json.loads(gc(tmp_path, inv, "--older-than", "1d", "--json"))
        assert {r["host"] for r in report} == {"node0", "node1"}
        for entry in report:
            jobs = {j["id"]: j for j in entry["jobs"]}
            assert jobs[done]["action"] == "removed" and jobs[live]["action"] == "running"
            assert jobs[done]["ray_dir"] == str(rays[entry["host"]])
            assert entry["bytes_freed"] >= 5000 and not entry["dry_run"]
        orphans = [j for r in report for j in r["jobs"] if j["id"] is None]
        assert {"id": None, "action": "removed", "bytes": 4096, "ray_dir": str(orphan)}.items() <= (
            next(j for j in orphans if j["ray_dir"] == str(orphan)).items()
        )
        assert not orphan.exists()
        for host in cluster.hosts:
            assert not job_dir(host, done).exists() and not rays[host.name].exists()
            assert (job_dir(host, live) / "job.json").is_file()
        assert jobs_json(tmp_path, cluster.inventory_path)  # the running job still lists
    finally:
        stopped = dc(tmp_path, "stop", inv, live)
        for own in rays.values():
            shutil.rmtree(own, ignore_errors=True)
    assert stopped.returncode == 0, stopped.stderr

    # The sync stores' gc, under both names; bad input names its option.
    for words in (("gc", "--sync"), ("sync-gc",)):
        synced = dc(tmp_path, *words, inv, "--dry-run", "--name", "nosuchtree")
        assert synced.returncode == 0, synced.stderr
        assert re.search(r"^node0: would free 0 B: no tree, 0 object\(s\)", synced.stdout, re.M)
    bad = dc(tmp_path, "gc", inv, "--older-than", "soon")
    assert bad.returncode == 2 and "--older-than" in bad.stderr
    mixed = dc(tmp_path, "gc", inv, "--sync", "--older-than", "1d")
    assert mixed.returncode == 2 and "--older-than" in mixed.stderr
