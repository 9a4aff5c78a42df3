"""The jobs scan and the job pack, run for real on this machine through the local
transport (the same shell lines the ssh transport sends): a job directory built as
jobctl and the supervisor leave it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from console.errors import HostProgramError
from console.hostprogs import jobs_scan
from console.inventory import Host
from console.jobs.report.bundle import fetch_host, stuck_rank
from console.jobs.report.scan import parse_scan, scan_host
from console.transport.local import LocalConnection


def make_job(root: Path, job_id: str) -> Path:
    job = root / ".distconsole" / "jobs" / job_id
    (job / "hang").mkdir(parents=True)
    (job / "job.json").write_text(json.dumps({"id": job_id, "hosts": ["local"], "plan": {"x": 1}}))
    (job / "supervisor.json").write_text(json.dumps({"state": "running", "first_failure": None}))
    (job / "supervisor.secret").write_text("00" * 32)
    (job / "worker-0.sh").write_text("python3 train.py\n")
    (job / "worker-0.out").write_text("".join(f"line {i}\n" for i in range(20000)))
    (job / "worker-0.exit").write_text("3\n")
    (job / "hang" / "worker-0.json").write_text("{}")
    return job


async def test_scan_lists_jobs_with_their_records_and_liveness(tmp_path: Path) -> None:
    make_job(tmp_path, "a-20260101-000000-aaaaaa")
    running = make_job(tmp_path, "b-20260101-000000-bbbbbb")
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        (running / "worker-0.exit").unlink()
        (running / "worker-0.pgid").write_text(f"{sleeper.pid}\n")
        (running / "supervisor.pid").write_text("999999999\n")  # no such process
        (
            tmp_path / ".distconsole" / "jobs" / "a-20260101-000000-aaaaaa" / "worker-0.pgid"
        ).write_text("1\n")
        host = Host(name="local", address="local", work_dir=str(tmp_path))
        found = await scan_host(LocalConnection(host), known=["a-20260101-000000-aaaaaa"])
    finally:
        sleeper.kill()
        sleeper.wait()
    by_id = {j.job_id: j for j in found}
    ended, live = by_id["a-20260101-000000-aaaaaa"], by_id["b-20260101-000000-bbbbbb"]
    assert ended.document == {
        "id": "a-20260101-000000-aaaaaa",
        "hosts": ["local"],
    }  # known: no plan
    assert live.document is not None and live.document["plan"] == {"x": 1}
    assert ended.processes["worker-0"]["exit"] == 3 and ended.alive == 0
    assert live.processes["worker-0"]["alive"] and live.alive == 1
    assert ended.supervisor_alive is None and not ended.unsupervised
    assert live.supervisor_alive is False and live.unsupervised


def test_scan_of_another_version_is_refused() -> None:
    newer = json.dumps({"program": jobs_scan.PROGRAM, "v": jobs_scan.VERSION + 1})
    with pytest.raises(HostProgramError, match=r"^n1: jobs_scan: speaks wire version"):
        parse_scan("n1", newer + "\n")


async def test_pack_keeps_each_file_s_end_and_never_the_secret(tmp_path: Path) -> None:
    job = make_job(tmp_path, "c-20260101-000000-cccccc")
    host = Host(name="local", address="local")
    bundle = await fetch_host(LocalConnection(host), str(job), file_max=1000, total_max=1 << 20)
    assert bundle.error is None
    assert "supervisor.secret" not in bundle.files
    assert bundle.files["worker-0.out"].endswith(b"line 19999\n")
    assert len(bundle.files["worker-0.out"]) == 1000
    assert bundle.manifest["truncated"] == [
        {"file": "worker-0.out", "bytes": (job / "worker-0.out").stat().st_size, "kept": 1000}
    ]
    assert bundle.json("supervisor.json") == {"state": "running", "first_failure": None}
    assert bundle.text("worker-0.exit") == "3\n" and "hang/worker-0.json" in bundle.files
    # The host's total bounds the pack: records first, the log gets what is left.
    small = await fetch_host(LocalConnection(host), str(job), file_max=1000, total_max=300)
    assert "job.json" in small.files and "worker-0.exit" in small.files
    assert sum(len(data) for data in small.files.values()) == 300
    [cut] = small.manifest["truncated"]
    assert cut["file"] == "worker-0.out" and small.files["worker-0.out"].endswith(b"19999\n")


async def test_pack_of_a_missing_directory_says_so(tmp_path: Path) -> None:
    host = Host(name="local", address="local")
    bundle = await fetch_host(LocalConnection(host), str(tmp_path / "nope"))
    assert bundle.error is not None and "no job directory" in bundle.error


def test_the_stuck_rank_is_the_stopped_one_else_the_oldest_progress() -> None:
    running = {"processes": [{"state": "S"}], "last_progress": 100.0}
    stopped = {"processes": [{"state": "T"}], "last_progress": 200.0}
    assert stuck_rank({"n0/a": running, "n1/b": stopped}) == "n1/b"
    older = {"processes": [{"state": "S"}], "last_progress": 50.0}
    assert stuck_rank({"n0/a": running, "n1/c": older}) == "n1/c"
    assert stuck_rank({}) is None


async def test_pack_follows_ray_tmp_for_the_ray_logs_only(tmp_path: Path) -> None:
    """A Ray job's ``ray-tmp`` link (to its /tmp/dcray-... dir) is not walked, but the
    node's Ray logs behind it are packed (the head's GCS server's too: issue 23 item 11),
    bounded like any log and after the job's own files; its sockets are not."""
    job = make_job(tmp_path / "work", "r-20260101-000000-rrrrrr")
    ray_tmp = tmp_path / "dcray-abc" / "t"
    session = ray_tmp / "session_2026-01-01_00-00-00_000000_1"
    (session / "logs" / "events").mkdir(parents=True)
    (ray_tmp / "session_latest").symlink_to(session)
    (session / "logs" / "raylet.out").write_text("".join(f"raylet {i}\n" for i in range(500)))
    (session / "logs" / "raylet.err").write_text("raylet error\n")
    (session / "logs" / "gcs_server.out").write_text("gcs\n")
    (session / "logs" / "worker-ab-01-7.out").write_text("task line\n")
    (session / "logs" / "events" / "event_GCS.log").write_text("{}\n")
    (session / "logs" / "linked.log").symlink_to(tmp_path / "elsewhere.log")
    (tmp_path / "elsewhere.log").write_text("not packed\n")
    (session / "sockets").mkdir()
    (session / "sockets" / "raylet").write_text("not packed\n")
    (job / "ray-tmp").symlink_to(ray_tmp)
    host = Host(name="local", address="local")
    bundle = await fetch_host(LocalConnection(host), str(job), file_max=1000, total_max=1 << 20)
    assert bundle.error is None
    logs = "ray-tmp/session_latest/logs/"
    ray_files = [f for f in bundle.files if f.startswith("ray-tmp/")]
    assert ray_files == [
        f"{logs}raylet.err",
        f"{logs}raylet.out",
        f"{logs}gcs_server.out",
        f"{logs}worker-ab-01-7.out",
        f"{logs}events/event_GCS.log",
    ]
    assert list(bundle.files)[-len(ray_files) :] == ray_files  # after the job's own
    assert bundle.text(f"{logs}raylet.err") == "raylet error\n"
    assert bundle.files[f"{logs}raylet.out"].endswith(b"raylet 499\n")
    assert len(bundle.files[f"{logs}raylet.out"]) == 1000
