"""Telling a person: the leader's supervisor POSTs a job's events to webhooks and runs a
command, with no console open (a part of the supervisor's single source).

The config's ``notify`` (``{"urls": [...], "command": str | None, "on": [events]}``)
says where and when: ``failed``, ``hung``, ``succeeded``, ``stopped``, ``restarted``,
``drained``, ``scaled-down`` (a lost host left an elastic job), ``replaced`` (a spare
host joined it) and ``slow`` (a rank holds the job back: ``pace/hook.py``). Each
notification is one JSON object: ``text`` (one line a Slack or Mattermost incoming
webhook shows as is), ``job``, ``name``, ``event``, ``state``,
``reason``, ``host``. A webhook is retried with backoff; the command gets the same fields
as ``DISTCONSOLE_*`` variables. Both run in threads of their own, so the job never waits
on them; the supervisor gives them a bounded time to finish before it exits.

Standard library only (urllib), Python >= 3.7. Webhook URLs are secrets: the events log
names them by :func:`masked_url` only.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

NOTIFY_EVENTS = (
    "failed", "hung", "succeeded", "stopped", "restarted", "drained", "scaled-down", "replaced",
    "slow",
)  # fmt: skip
NOTIFY_DEFAULT_ON = ("failed", "hung", "succeeded")
NOTIFY_RETRIES = (0.0, 2.0, 4.0, 8.0, 16.0)  # seconds before each attempt
NOTIFY_TIMEOUT_S = 10.0  # one POST, one command
NOTIFY_LOG = "notify.log"  # the command's output, in the job directory
# The command, 0600 in the job directory: run as ``bash FILE``, since ``bash -c TEXT``
# showed its tokens to every user of the host in ``ps``. ``.secret``: never packed
# into a report bundle (hostprogs/job_pack.py).
NOTIFY_COMMAND_FILE = "notify-command.secret"


def masked_url(url: str) -> str:
    """``https://hooks.slack.com/…`` — the scheme and host, never the path or query
    (a Slack/Discord webhook's path is its secret), nor any user:password."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "(a webhook URL)"
    host = parts.hostname or "?"
    if parts.port:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme or '?'}://{host}/…"


def notification(job: dict[str, Any], event: str, state: str, reason: str, host: str) -> dict:
    name = str(job.get("name") or job.get("job_id"))
    where = f" on {host}" if host else ""
    text = f"distconsole: job {name} {event}{where}"
    if reason:
        text += ": " + reason
    return {
        "text": text,
        "job": str(job.get("job_id")),
        "name": name,
        "event": event,
        "state": state,
        "reason": reason,
        "host": host,
    }


class SvNotifier:
    """Sends a job's notifications; ``log(event, **details)`` records what became of each."""

    def __init__(self, cfg: dict[str, Any], job_dir: str, log: Callable[..., None]) -> None:
        notify = cfg.get("notify") or {}
        self.urls: list[str] = [str(u) for u in notify.get("urls") or ()]
        self.command: str | None = notify.get("command") or None
        self.on = set(notify.get("on") or NOTIFY_DEFAULT_ON)
        self.job = {"job_id": cfg.get("job_id"), "name": cfg.get("name")}
        self.job_dir = job_dir
        self.log = log
        self.threads: list[threading.Thread] = []
        self.sent: set = set()  # (event, host): a job fails, hangs, ... once

    @property
    def wanted(self) -> bool:
        return bool(self.urls or self.command)

    def notify(self, event: str, state: str, reason: str = "", host: str = "") -> None:
        if not self.wanted or event not in self.on:
            return
        if event not in ("restarted", "drained"):
            if (event, host) in self.sent:
                return
            self.sent.add((event, host))
        body = notification(self.job, event, state, reason, host)
        for url in self.urls:
            self._start(self._post, url, body)
        if self.command:
            self._start(self._run, self.command, body)

    def _start(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _post(self, url: str, body: dict) -> None:
        data = json.dumps(body).encode()
        why = ""
        for attempt, delay in enumerate(NOTIFY_RETRIES, 1):
            time.sleep(delay)
            request = urllib.request.Request(
                url, data=data, headers={"Content-Type": "application/json"}, method="POST"
            )
            try:
                with urllib.request.urlopen(request, timeout=NOTIFY_TIMEOUT_S) as answer:
                    status = answer.status
            except urllib.error.HTTPError as exc:
                status, why = exc.code, f"HTTP {exc.code}"
                if 400 <= exc.code < 500 and exc.code not in (408, 429):
                    break  # the receiver refuses it: asking again changes nothing
                continue
            except (OSError, ValueError) as exc:
                why = str(getattr(exc, "reason", exc))
                continue
            self.log("notified", to=masked_url(url), of=body["event"], attempts=attempt,
                     status=status)  # fmt: skip
            return
        self.log("notify-failed", to=masked_url(url), of=body["event"], why=why)

    def _command_file(self, command: str) -> str:
        path = os.path.join(self.job_dir, NOTIFY_COMMAND_FILE)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as handle:
            handle.write(command + "\n")
        os.replace(tmp, path)
        return path

    def _run(self, command: str, body: dict) -> None:
        env = dict(os.environ)
        env.update({"DISTCONSOLE_" + key.upper(): str(value) for key, value in body.items()})
        try:
            script = self._command_file(command)
            with open(os.path.join(self.job_dir, NOTIFY_LOG), "ab") as out:
                proc = subprocess.Popen(
                    ["bash", script],
                    cwd=self.job_dir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except OSError as exc:
            self.log("notify-failed", to="command", of=body["event"], why=str(exc))
            return
        try:
            status = proc.wait(timeout=NOTIFY_TIMEOUT_S * 6)
        except subprocess.TimeoutExpired:
            proc.kill()
            self.log(
                "notify-failed", to="command", of=body["event"], why="still running after 60 s"
            )
            return
        if status == 0:
            self.log("notified", to="command", of=body["event"], status=0)
        else:
            self.log("notify-failed", to="command", of=body["event"], why=f"exit {status}")

    def drain(self, timeout: float) -> None:
        """Give the notifications under way up to ``timeout`` seconds to finish."""
        deadline = time.time() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.time()))


def failure_reason(failure: dict[str, Any] | None) -> tuple[str, str]:
    """(reason, host) of a job's first failure, in a line: which process and rank, how
    it ended, and torchrun's root cause when the supervisor read one."""
    if not failure:
        return "", ""
    host = str(failure.get("host") or "")
    process = str(failure.get("process") or "")
    ranks = [r for r in failure.get("ranks") or () if isinstance(r, int)]
    if not process:
        return str(failure.get("reason") or "lost"), host
    who = process + (f" (rank {ranks[0]})" if len(ranks) == 1 else "")
    if failure.get("signal"):
        how = f"killed by {failure['signal']}"
    elif failure.get("exit_code") is not None:
        how = f"exit status {failure['exit_code']}"
    else:
        how = str(failure.get("reason") or "ended")
    reason = f"{who} {how}"
    told = [str(line) for line in failure.get("first_error") or ()]
    if told and told[0].startswith("root cause:"):
        reason += "; " + told[0]
    return reason, host
