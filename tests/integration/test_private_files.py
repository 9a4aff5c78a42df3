"""Issue 23 item 1: what distconsole writes that can hold a job's environment, secret or
logs is private to its user whatever the umask, on real sshd hosts with users of their
own and homes open to everyone (755, as many clusters' homes are): the job directory
and all in it (700/600), read as another host's user; the local job history; an older
job directory opened up again is tightened by the next ``stop``; a report bundle."""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
from pathlib import Path

import pytest
from sshd_cluster import SshdCluster, SshdHost

from console.jobs.history import DB_NAME
from console.jobs.models import JobState
from console.jobs.spec import make_spec
from tests.integration.test_jobs_cli import dc, jobs_json
from tests.integration.test_jobs_mpi import (
    finish,
    needs_mpirun,
    rank_output,
    runner_for,
    shared_cluster,
)

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

JOBS = "distconsole/.distconsole/jobs"  # under each home: the inventory's work_dir


def open_bits(root: Path) -> list[str]:
    """Everything under ``root`` (itself too) that its group or others may use."""
    found = []
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
            found.append(f"{path.relative_to(root.parent)} {stat.filemode(st.st_mode)}")
    return found


def read_as(user: SshdHost, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["cat", str(path)],
        user=user.uid,
        group=user.gid,
        extra_groups=[],
        capture_output=True,
        text=True,
    )


def open_homes(cluster: SshdCluster) -> None:
    for host in cluster.hosts:
        host.home.chmod(0o755)
        # What an older distconsole left: the jobs folder open to all.
        jobs = host.home / JOBS
        jobs.mkdir(parents=True, exist_ok=True)
        os.chown(host.home / "distconsole", host.uid, host.gid)
        os.chown(jobs.parent, host.uid, host.gid)
        os.chown(jobs, host.uid, host.gid)
        for path in (host.home / "distconsole", jobs.parent, jobs):
            path.chmod(0o755)


def test_a_jobs_files_are_private_to_its_user(sshd_cluster, tmp_path) -> None:
    cluster = sshd_cluster(n=2)
    open_homes(cluster)
    inv = str(cluster.inventory_path)
    token = f"hf_{secrets.token_hex(12)}"
    launched = dc(
        tmp_path, "launch", inv, "--kind", "ddp", "--gpus-per-host", "1", "--name", "private",
        "--env", f"HF_TOKEN={token}", "--", "example:ddp", "--steps", "2",
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    job_id = next(j["id"] for j in jobs_json(tmp_path, cluster.inventory_path))
    node0, node1 = cluster.hosts
    for host, other in ((node0, node1), (node1, node0)):
        job_dir = host.home / JOBS / job_id
        assert token in (job_dir / "job.json").read_text()
        assert open_bits(job_dir.parent) == [], host.name
        for name in ("job.json", "supervisor.secret", "torchrun-0.out", "torchrun-0.sh"):
            refused = read_as(other, job_dir / name)
            assert refused.returncode != 0 and token not in refused.stdout, (host.name, name)
        assert read_as(host, job_dir / "job.json").returncode == 0  # its own user reads it

    history = tmp_path / "data" / DB_NAME
    assert token in history.read_bytes().decode(errors="replace")
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    assert stat.S_IMODE(history.parent.stat().st_mode) == 0o700

    # A job directory an older distconsole wrote (open to all) is tightened by the next
    # command that touches it.
    old_dir = node0.home / JOBS / job_id
    old_dir.parent.chmod(0o755)
    old_dir.chmod(0o755)
    (old_dir / "job.json").chmod(0o644)
    (old_dir / "torchrun-0.out").chmod(0o664)
    assert read_as(node1, old_dir / "job.json").returncode == 0
    stopped = dc(tmp_path, "stop", inv, job_id)
    assert stopped.returncode == 0, stopped.stderr
    assert open_bits(old_dir.parent) == []
    assert read_as(node1, old_dir / "job.json").returncode != 0
    # `jobs`, which lists what the hosts hold, closes an open job directory too.
    other_dir = node1.home / JOBS / job_id
    for path in (other_dir.parent, other_dir):
        path.chmod(0o755)
    (other_dir / "job.json").chmod(0o644)
    assert read_as(node0, other_dir / "job.json").returncode == 0
    assert [j["id"] for j in jobs_json(tmp_path, cluster.inventory_path)] == [job_id]
    assert stat.S_IMODE(other_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(other_dir.parent.stat().st_mode) == 0o700
    assert read_as(node0, other_dir / "job.json").returncode != 0

    out = tmp_path / "bundle"
    reported = dc(tmp_path, "report", inv, job_id, "--out", str(out))
    assert reported.returncode == 0, reported.stderr
    # The bundle masks --env values (report/env_masking.py) but keeps the name; it is
    # private all the same: the job's logs in it are copied as written.
    bundled = [p.read_text(errors="replace") for p in out.rglob("job.json")]
    assert bundled and all(token not in text for text in bundled)
    assert any("HF_TOKEN" in text for text in bundled)
    assert open_bits(out) == []


@pytest.mark.mpi
@needs_mpirun
async def test_mpi_rank_files_are_private(sshd_cluster, tmp_path) -> None:
    """The ranks' own files (``ranks/rank.R/``, written through Open MPI's daemons with
    the login umask, not by jobctl) are private too."""
    cluster = shared_cluster(sshd_cluster, 2)
    cluster.hosts[0].home.chmod(0o755)
    async with runner_for(cluster, tmp_path) as runner:
        spec = make_spec(
            kind="mpi", program="/bin/sh", gpus_per_host=1, args=["-c", "echo $HF_TOKEN"],
            env={"HF_TOKEN": "hf_rank_secret"},
        )  # fmt: skip
        plan = await runner.prepare(spec)
        job = await runner.launch(plan)
        assert await finish(runner, job, cluster) is JobState.SUCCEEDED
    assert set(rank_output(cluster, plan).values()) == {"hf_rank_secret\n"}
    job_dir = cluster.hosts[0].home / plan.job_dirs["node0"].removeprefix("~/")
    assert (job_dir / "ranks" / "rank.1" / "stdout").is_file()
    assert open_bits(job_dir.parent) == []
