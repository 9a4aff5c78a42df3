"""The log follower over real OpenSSH sshd: every rank's lines arrive once, with the right
rank, across a host's sshd being stopped and started mid-stream."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sshd_cluster import SshdCluster

from console.inventory import Host
from console.jobs.models import LogFile
from console.logs.follower import FollowTarget, HostLogFollower, follow_hosts
from console.logs.models import LogBatch, rank_key
from console.logs.prefixes import context_for
from console.transport import ClusterConnections, HostState

pytestmark = [pytest.mark.sshd, pytest.mark.timeout(120)]

Factory = Callable[..., SshdCluster]
JOB = "numbered-20260101-000000-abcdef"
LINES_PER_RANK = 4000

# A real process writing numbered lines into every rank file, as fast as a slow trainer:
# rank files are created by the writer (the follower waits for them), one worker file
# appears late (found by listing the job dir), rank 0 writes a 100 kB line and a line
# of binary garbage, and each host gets its ".exit" marker when its ranks are done.
WRITER = r"""
import os, sys, time
spec = sys.argv[1:]  # host_dir:rank ...
files = {}
for item in spec:
    d, r = item.rsplit(":", 1)
    files[int(r)] = open(os.path.join(d, "rank-%s.out" % r), "ab", buffering=0)
n = int(os.environ["LINES"])
for i in range(n):
    for r, f in files.items():
        f.write(b"rank %d line %d\n" % (r, i))
        if r == 0 and i == 100:
            f.write(b"L" * 100000 + b"\n")
            f.write(os.urandom(2000).replace(b"\n", b"") + b"\n")
    if i == 200:
        late = os.path.join(spec[0].rsplit(":", 1)[0], "worker-0.err")
        with open(late, "wb") as w:
            w.write(b"late worker line\n")
    if i % 100 == 0:
        time.sleep(0.15)
for d in sorted({item.rsplit(":", 1)[0] for item in spec}):
    with open(os.path.join(d, "ranks.exit"), "w") as m:
        m.write("0\n")
"""


def hosts_of(cluster: SshdCluster) -> list[Host]:
    return [
        Host(
            name=h.name,
            address=h.address,
            port=h.port,
            user=h.user,
            identity_file=str(cluster.client_key_path),
            known_hosts=str(cluster.known_hosts_path),
            connect_timeout=3.0,
        )
        for h in cluster.hosts
    ]


def job_dir_of(cluster: SshdCluster, name: str) -> Path:
    host = cluster.host(name)
    path = Path(host.home) / "distconsole" / ".distconsole" / "jobs" / JOB
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o755)
    return path


def target(name: str, ranks: list[int]) -> FollowTarget:
    remote_dir = f"~/distconsole/.distconsole/jobs/{JOB}"
    files = tuple(
        context_for(
            JOB,
            name,
            LogFile(f"{remote_dir}/rank-{r}.out", "stdout", "rank", rank=r, local_rank=i),
            None,
        )
        for i, r in enumerate(ranks)
    )
    return FollowTarget(
        JOB, name, files=files, dirs=(remote_dir,), done_markers=(f"{remote_dir}/ranks.exit",)
    )


async def wait_up(pool: ClusterConnections, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while any(s.state is not HostState.UP for s in pool.statuses().values()):
        assert time.monotonic() < deadline, pool.statuses()
        await asyncio.sleep(0.1)


async def test_every_numbered_line_once_across_an_sshd_outage(sshd_cluster: Factory) -> None:
    cluster = sshd_cluster(n=2)
    layout = {"node0": [0, 1], "node1": [2, 3]}
    names = [h.name for h in cluster.hosts]
    layout = dict(zip(names, layout.values(), strict=True))
    spec = [f"{job_dir_of(cluster, n)}:{r}" for n, ranks in layout.items() for r in ranks]
    async with ClusterConnections(hosts_of(cluster)) as pool:
        await wait_up(pool)
        followers = [
            HostLogFollower(pool[n], target(n, ranks), retry_max_s=1.0)
            for n, ranks in layout.items()
        ]
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, *spec], env=dict(os.environ, LINES=str(LINES_PER_RANK))
        )
        seen: dict[Any, list[str]] = defaultdict(list)
        notes: list[tuple[str, str]] = []
        finished: set[str] = set()
        victim = names[1]
        outage_done = False

        async def consume() -> None:
            nonlocal outage_done
            async for batch in follow_hosts(followers):
                record(batch)
                if not outage_done and len(seen[2]) > 300:
                    outage_done = True
                    # sshd and every session of the host go away while the writer goes on
                    await asyncio.to_thread(cluster.stop, victim)
                    await asyncio.sleep(4.0)
                    await asyncio.to_thread(cluster.start, victim)

        def record(batch: LogBatch) -> None:
            for line in batch.lines:
                seen[rank_key(line)].append(line.text)
                assert line.host == batch.host and line.job_id == JOB
            notes.extend((batch.host, n.kind) for n in batch.notes)
            if batch.finished:
                finished.add(batch.host)

        try:
            await asyncio.wait_for(consume(), 100)
        finally:
            writer.kill()
            writer.wait()
    assert finished == set(names)
    assert (victim, "disconnected") in notes and (victim, "resumed") in notes
    for ranks in layout.values():
        for r in ranks:
            numbered = [t for t in seen[r] if t.startswith(f"rank {r} line ")]
            assert numbered == [f"rank {r} line {i}" for i in range(LINES_PER_RANK)], r
    # rank 0's 100 kB line arrives in pieces (split at 32 KiB), its garbage line replaced
    long_pieces = [t for t in seen[0] if t and set(t) == {"L"}]
    assert "".join(long_pieces) == "L" * 100000 and max(map(len, long_pieces)) <= 32768
    assert any("\ufffd" in t for t in seen[0])
    # the worker file appeared later and was found by listing the job directory
    assert seen["worker0"] == ["late worker line"]


async def test_truncation_over_ssh_restarts_the_file(sshd_cluster: Factory) -> None:
    cluster = sshd_cluster(n=1)
    name = cluster.hosts[0].name
    log = job_dir_of(cluster, name) / "rank-0.out"
    log.write_bytes(b"".join(b"old %d\n" % i for i in range(50)))
    async with ClusterConnections(hosts_of(cluster)) as pool:
        await wait_up(pool)
        follower = HostLogFollower(pool[name], target(name, [0]))
        texts: list[str] = []
        kinds: list[str] = []
        batches = follower.batches()
        try:
            async with asyncio.timeout(30):
                async for batch in batches:
                    texts.extend(line.text for line in batch.lines)
                    kinds.extend(n.kind for n in batch.notes)
                    if texts == [f"old {i}" for i in range(50)]:
                        log.write_bytes(b"new 0\n")  # truncate (copytruncate-style)
                    if "new 0" in texts:
                        break
        finally:
            await batches.aclose()  # type: ignore[attr-defined]
    assert "truncated" in kinds
    assert texts == [f"old {i}" for i in range(50)] + ["new 0"]
    assert follower.cursors[f"~/distconsole/.distconsole/jobs/{JOB}/rank-0.out"].offset == 6


def dc(tmp_path: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DISTCONSOLE_DATA_DIR=str(tmp_path / "data"))
    return subprocess.run(
        [sys.executable, "-m", "console", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_logs_cli_follows_a_real_ddp_job_on_two_hosts(
    sshd_cluster: Factory, tmp_path: Path
) -> None:
    cluster = sshd_cluster(n=2)
    inv = str(cluster.inventory_path)
    launched = dc(
        tmp_path, "launch", inv, "--kind", "ddp", "--gpus-per-host", "1", "--detach", "--",
        "example:ddp", "--steps", "30", "--sleep", "0.05",
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    job_id = launched.stdout.strip()
    followed = dc(tmp_path, "logs", inv, job_id, "--follow", "--since-start", "--json")
    assert followed.returncode == 0, followed.stderr
    rows = [json.loads(line) for line in followed.stdout.splitlines()]
    steps: dict[int, list[str]] = defaultdict(list)
    for row in rows:
        assert set(row) >= {"host", "rank", "stream", "line"}
        if " step " in row["line"] and row["rank"] is not None:
            steps[row["rank"]].append(row["line"])
            assert row["line"].startswith(f"rank {row['rank']} ")  # attributed right
            assert row["host"] == ("node0" if row["rank"] == 0 else "node1")
    assert sorted(steps) == [0, 1]
    assert all(len(lines) == len(set(lines)) for lines in steps.values())
    # the job is over: a second, non-following read prints the same rank lines
    again = dc(tmp_path, "logs", inv, job_id, "--rank", "1", "--grep", "STEP")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [f"node1 r1| {line}" for line in steps[1]]
