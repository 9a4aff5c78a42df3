"""Notifications: masking, the reason line, validation, the inventory default, and the
supervisor's sender against a real local HTTP server (refusals, retries)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from console.errors import JobSpecError
from console.hostprogs.supervisor.notify import SvNotifier, failure_reason, masked_url
from console.inventory import load
from console.jobs.plan.planner import plan
from console.jobs.spec import make_spec


def test_masked_url_keeps_scheme_and_host_only() -> None:
    assert masked_url("https://hooks.slack.com/services/T0/B0/xyz") == "https://hooks.slack.com/…"
    assert masked_url("http://user:pw@10.0.0.5:8080/hook?token=abc") == "http://10.0.0.5:8080/…"


def test_failure_reason_names_process_rank_end_and_root_cause() -> None:
    failure = {
        "host": "node1",
        "process": "torchrun-1",
        "ranks": [2],
        "exit_code": 1,
        "first_error": ["root cause: rank 2 on node1: exit status 3 at 2026-11-26_12:03:11"],
    }
    assert failure_reason(failure) == (
        "torchrun-1 (rank 2) exit status 1; root cause: rank 2 on node1: exit status 3 at "
        "2026-11-26_12:03:11",
        "node1",
    )
    assert failure_reason({"host": "node2", "process": None, "reason": "connection lost"}) == (
        "connection lost",
        "node2",
    )
    assert failure_reason(None) == ("", "")


def test_spec_refuses_bad_urls_and_events_without_echoing_the_secret() -> None:
    with pytest.raises(JobSpecError) as bad:
        make_spec(kind="ps", program="x.py", notify=["hooks.slack.com/services/SECRET"])
    assert bad.value.field == "notify" and "SECRET" not in str(bad.value)
    with pytest.raises(JobSpecError, match="unknown event 'failure'"):
        make_spec(kind="ps", program="x.py", notify_on="failure")


def test_the_leader_hosts_inventory_notify_is_the_default(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        "defaults:\n  notify: https://hooks.slack.com/services/T/B/X\n"
        "hosts:\n  - {name: n0, address: 10.0.0.1, gpus: 1}\n"
        "  - {name: n1, address: 10.0.0.2, gpus: 1}\n"
    )
    inventory = load(hosts)
    planned = plan(make_spec(kind="ddp", program="train.py"), inventory, job_id="j-1")
    assert planned.notify is not None
    assert planned.notify.urls == ("https://hooks.slack.com/services/T/B/X",)
    assert planned.notify.on == ("failed", "hung", "succeeded")
    own = make_spec(kind="ddp", program="train.py", notify=["https://example.com/h"])
    assert plan(own, inventory, job_id="j-2").notify.urls == ("https://example.com/h",)  # type: ignore[union-attr]
    hosts.write_text("defaults:\n  notify: [ftp://x/y]\nhosts: [a]\n")
    with pytest.raises(Exception, match="webhook URL"):
        load(hosts)


class _Hook:
    def __init__(self, answers: list[int]) -> None:
        self.bodies: list[dict[str, Any]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                hook.bodies.append(body)
                self.send_response(answers.pop(0) if answers else 200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook/SECRET"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _notifier(tmp_path: Path, url: str, on: list[str]) -> tuple[SvNotifier, list[dict[str, Any]]]:
    logged: list[dict[str, Any]] = []
    cfg = {"job_id": "j-1", "name": "train", "notify": {"urls": [url], "on": on}}
    return SvNotifier(cfg, str(tmp_path), lambda e, **d: logged.append(dict(d, event=e))), logged


def test_a_refused_post_is_retried_a_rejected_one_is_not(tmp_path: Path) -> None:
    hook = _Hook([503, 200])
    notifier, logged = _notifier(tmp_path, hook.url, ["failed", "stopped"])
    notifier.notify("failed", "failed", "worker-1 exit status 3", "node1")
    notifier.notify("failed", "failed", "again", "node1")  # the same end: once
    notifier.notify("succeeded", "succeeded")  # not asked for
    notifier.drain(30)
    assert [b["event"] for b in hook.bodies] == ["failed", "failed"]  # 503, then 200
    assert logged == [
        {
            "event": "notified",
            "to": masked_url(hook.url),
            "of": "failed",
            "attempts": 2,
            "status": 200,
        }
    ]
    rejected = _Hook([404])
    notifier, logged = _notifier(tmp_path, rejected.url, ["stopped"])
    notifier.notify("stopped", "stopped")
    notifier.drain(30)
    assert len(rejected.bodies) == 1 and logged[0]["event"] == "notify-failed"
    assert logged[0]["why"] == "HTTP 404" and "SECRET" not in json.dumps(logged)
