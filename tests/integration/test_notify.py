"""A person is told when automation gives up (issue 25 item 5): the leader host's
supervisor POSTs the job's end to a webhook and runs a command there, with no console
open (the launching CLI has exited), on real sshd hosts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_jobs_cli import dc, jobs_json
from tests.integration.test_supervisor import LOOP, job_dir, read_json, wait_for

pytestmark = [pytest.mark.sshd, pytest.mark.slow]
SECRET = "T0000/B0000/s3cr3tXYZ"


class Receiver:
    """A webhook on 127.0.0.1 that answers 500 to its first ``fail_first`` POSTs."""

    def __init__(self, fail_first: int = 0) -> None:
        self.posts: list[dict[str, Any]] = []
        self.refused = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if receiver.refused < fail_first:
                    receiver.refused += 1
                    self.send_response(500)
                else:
                    receiver.posts.append(json.loads(body))
                    self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/{SECRET}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver(fail_first=1)
    yield made
    made.close()


def test_a_failed_detached_job_posts_once_and_runs_the_command(
    sshd_cluster, tmp_path: Path, receiver: Receiver
) -> None:
    cluster = sshd_cluster(n=2)
    command = 'echo "$DISTCONSOLE_EVENT $DISTCONSOLE_JOB $DISTCONSOLE_HOST" > notified.txt'
    launched = dc(
        tmp_path, "launch", str(cluster.inventory_path), "--kind", "ps", "--ps", "1",
        "--workers", "2", "--skip-preflight", "--detach", "--env", "CRASH=1",
        "--notify", receiver.url, "--notify-command", command, "--", "python3", "-c", LOOP,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    assert SECRET not in launched.stdout + launched.stderr
    job_id = launched.stdout.strip()
    leader = job_dir(cluster, "node0", job_id)
    wait_for(lambda: read_json(leader / "supervisor.json").get("state") == "failed", timeout=60)
    # The first POST was refused (500): the supervisor tried again after its backoff.
    wait_for(lambda: len(receiver.posts) == 1, timeout=30)
    [post] = receiver.posts
    assert (post["job"], post["event"], post["state"]) == (job_id, "failed", "failed")
    failed_on = read_json(leader / "supervisor.json")["first_failure"]["host"]  # worker-1's
    assert post["host"] == failed_on and "worker-1 exit status 3" in post["reason"], post
    assert post["text"].startswith(f"distconsole: job {post['name']} failed on {failed_on}: ")
    wait_for(lambda: (leader / "notified.txt").exists(), timeout=30)
    assert (leader / "notified.txt").read_text().split() == ["failed", job_id, failed_on]
    events = [json.loads(x) for x in (leader / "events.jsonl").read_text().splitlines()]
    told = [e for e in events if e["event"] == "notified"]
    assert {e["to"] for e in told} == {
        "command",
        f"http://127.0.0.1:{receiver.url.split(':')[2].split('/')[0]}/…",
    }
    assert any(e.get("attempts") == 2 for e in told)
    assert SECRET not in (leader / "events.jsonl").read_text()
    time.sleep(3)  # no second POST for the same end
    assert len(receiver.posts) == 1
    [job] = jobs_json(tmp_path, cluster.inventory_path)
    assert job["state"] == "failed"


def test_plan_and_report_never_show_a_webhooks_secret(sshd_cluster, tmp_path: Path) -> None:
    cluster = sshd_cluster(n=1)
    url = f"https://hooks.slack.com/services/{SECRET}"
    planned = dc(
        tmp_path, "plan", str(cluster.inventory_path), "--kind", "ps", "--ps", "1",
        "--workers", "1", "--notify", url, "--notify-on", "failed,stopped",
        "--", "python3", "-c", "print(1)",
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    assert SECRET not in planned.stdout
    assert "notify: https://hooks.slack.com/… on failed, stopped" in planned.stdout
    as_json = dc(
        tmp_path, "plan", str(cluster.inventory_path), "--kind", "ps", "--ps", "1",
        "--workers", "1", "--notify", url, "--json", "--", "python3", "-c", "print(1)",
    )  # fmt: skip
    assert SECRET not in as_json.stdout
    assert json.loads(as_json.stdout)["notify"]["urls"] == ["https://hooks.slack.com/…"]
    bad = dc(
        tmp_path, "plan", str(cluster.inventory_path), "--kind", "ps", "--notify",
        f"ftp://files.example.com/{SECRET}", "--", "python3", "-c", "print(1)",
    )  # fmt: skip
    assert bad.returncode == 2 and "--notify" in bad.stderr and SECRET not in bad.stderr
