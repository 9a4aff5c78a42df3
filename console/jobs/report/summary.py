"""A job's ``summary.txt`` (``bundle.py`` writes it) and the lines the jobs screen and
``jobs`` show under a job: what happened, first failure or hang, which rank, where it was
stuck, each process's end, what the supervisors' records add (restarts, membership, slow
ranks: ``slow_text.py``). Split from ``bundle.py``, which re-exports these names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from console.hostprogs import job_pack
from console.jobs.history import JobRecord
from console.jobs.membership import job_hosts, spares_of, with_spares
from console.jobs.report.discover import failure_text
from console.jobs.report.membership import membership_lines, spare_notes, when
from console.jobs.report.settle import FINAL
from console.jobs.report.slow_ranks import pace_lines, pace_source, period_lines

PROCESS_WRAPPER = re.compile(r"[a-z_]+-\d+\.sh")
STACK_LINES = 25  # top lines of the stuck rank's stack in summary.txt


@dataclass
class HostBundle:
    host: str
    files: dict[str, bytes] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def json(self, name: str) -> Any:
        data = self.files.get(name)
        if data is None:
            return None
        try:
            return json.loads(data)
        except ValueError:
            return None

    def text(self, name: str) -> str:
        return self.files.get(name, b"").decode("utf-8", "replace")


def summary_lines(
    record: JobRecord,
    supervisor: Mapping[str, Any] | None = None,
    validated: Mapping[str, str] | None = None,
) -> list[str]:
    """What happened, from the history row and the leader's supervisor record;
    ``validated``: each host's last ``validate`` (``validated 2 h ago: ok``; console.validate
    sits above jobs, so the caller reads it)."""
    view = with_spares(record.host_view, record.plan)  # the plan names the spares
    truth = supervisor or {}
    settled = bool(view.get("settled")) or (
        record.state.finished and truth.get("state") not in (None, *FINAL)
    )
    if settled:
        truth = {}  # stale (its supervisor went away): the state a scan settled is the word
    state = record.state.value + (" (hung)" if view.get("hung") else "")
    leader = view.get("leader") or truth.get("host")
    spares = spares_of(truth) or view["spare_hosts"]
    lines = [
        f"job {record.id} ({record.name}), {record.kind.value}, "
        f"{record.plan.world_size} ranks on {', '.join(job_hosts(record.hosts, view))}"
        + (f" (spare hosts: {', '.join(spares)})" if spares else "")
        + (f" (rendezvous host: {view['rendezvous_host']})" if view["rendezvous_host"] else ""),
        f"state: {truth.get('state') or state}"
        + (
            " (settled by a console: nothing of the job was left alive)"
            if settled
            else f" (recorded by {leader}'s supervisor)"
            if leader
            else ""
        ),
        f"started {when(record.started)}"
        + (f", ended {when(record.ended)}" if record.ended else ""),
    ]
    lines += host_view_lines(view, truth)
    if validated is not None and record.hosts:
        told = [f"{h} {validated.get(h, 'not validated')}" for h in record.hosts]
        lines.append("last validation: " + "; ".join(told))
    first = truth.get("first_failure") or view.get("first_failure")
    if first:
        lines.append("first failure: " + failure_block(first))
    elif record.failure:
        lines.append("failure: " + record.failure)
    return lines


def failure_block(failure: Mapping[str, Any]) -> str:
    """The supervisor's first failure as ``launch``'s failure block reads it: the failed
    process, then the cause the supervisor found (torchrun's root cause with the failed
    rank's own last words, or the first error), then the process's last lines."""
    text = failure_text(failure)
    cause = [str(line) for line in failure.get("first_error") or ()]
    if not cause or not failure.get("process"):
        return text
    head, *rest = text.split("\n")
    told = [] if cause[0].startswith("root cause:") else ["first error:"]  # as JobFailure's
    return "\n".join([head, *told, *cause, *rest])


def restart_lines(view: Mapping[str, Any], truth: Mapping[str, Any]) -> list[str]:
    """``restarts: 2; the last: rank 1 on node0 (exit status 3)`` (--max-restarts)."""
    count = truth.get("restarts") or view.get("restarts")
    if not isinstance(count, int) or count <= 0:
        return []
    last = truth.get("last_restart") or view.get("last_restart")
    if not isinstance(last, Mapping):
        return [f"restarts: {count}"]
    who = f"rank {last['rank']}" if isinstance(last.get("rank"), int) else last.get("process")
    how = last.get("signal") or (
        f"exit status {last['exit_code']}" if last.get("exit_code") is not None else "ended"
    )
    return [f"restarts: {count}; the last: {who} on {last.get('host')} ({how})"]


def host_view_lines(
    view: Mapping[str, Any], supervisor: Mapping[str, Any] | None = None
) -> list[str]:
    """What the supervisors' records add to a job's state: a dead supervisor, a hang
    (the jobs screen shows these under the selected job, summary.txt too; the screen
    adds its key hint, ``ui/jobs_service.screen_notes``)."""
    truth = supervisor or {}
    # --min-hosts: each lost host the job went on without; --spare-hosts: what became
    # of each spare (the host it replaced, or not needed).
    lines = restart_lines(view, truth) + membership_lines(view, truth)
    unsupervised = view.get("unsupervised") or []
    if unsupervised:
        lines.append(
            f"unsupervised on {', '.join(unsupervised)}: the supervisor died while the "
            "job's processes run on (nothing stops the rest if one fails)"
        )
    hang = truth.get("hang") or view.get("hang")
    if hang:
        captured = ", ".join(hang.get("captured") or []) or "nothing"
        idle = hang.get("idle_s")
        idle_text = f"{idle:.0f}" if isinstance(idle, int | float) else "?"
        lines.append(
            f"hang: no progress for {idle_text} s, marked at "
            f"{when(hang.get('at'))}; captured {captured}"
        )
    return lines


def stuck_rank(captures: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The capture (host/NAME) of the rank that held the others: a stopped, dead or
    uninterruptible process first, else the one whose progress is oldest."""

    def stuck_state(capture: Mapping[str, Any]) -> bool:
        return any(p.get("state") in ("T", "t", "D", "Z") for p in capture.get("processes") or [])

    stopped = [key for key, c in captures.items() if stuck_state(c)]
    if stopped:
        return sorted(stopped)[0]
    progress: dict[str, float] = {
        key: float(c["last_progress"])
        for key, c in captures.items()
        if isinstance(c.get("last_progress"), int | float)
    }
    if progress:
        return min(progress, key=lambda k: progress[k])
    return sorted(captures)[0] if captures else None


def process_lines(
    bundles: Sequence[HostBundle], spares: Mapping[str, str] | None = None
) -> list[str]:
    """One line per process; a spare's says what became of it (``spares``: host -> note,
    ``report/membership.spare_notes``)."""
    lines = []
    for bundle in bundles:
        # A follower's record carries its host's name (hosts may share a home).
        supervisor = (
            bundle.json(f"supervisor.{bundle.host}.json") or bundle.json("supervisor.json") or {}
        )
        recorded = supervisor.get("processes") or {}
        # A wrapper is NAME.sh with NAME a process's ROLE-INDEX (``jobs/paths.process_name``);
        # other scripts of the job (Horovod's host discovery) are no process.
        names = sorted(n[: -len(".sh")] for n in bundle.files if PROCESS_WRAPPER.fullmatch(n))
        for name in names:
            info = recorded.get(name) or {}
            exit_text = bundle.text(f"{name}.exit").strip()
            code = info.get("exit_code", exit_text or None)
            how = f"exit {code}" if code not in (None, "") else "no exit recorded"
            if info.get("signal"):
                how += f" ({info['signal']})"
            rank = f" rank {info['rank']}" if info.get("rank") is not None else ""
            note = (spares or {}).get(bundle.host)
            how = f"{note} ({how})" if note else how
            lines.append(f"  {bundle.host} {name}{rank}: {how}")
    return lines


def ray_lines(bundles: Sequence[HostBundle]) -> list[str]:
    """A Ray job's nodes: the head (``ray start --head``, run inside the driver's script,
    so no process of its own: its output is ``raynode-0.out/.err``, with no ``.sh``) and
    each node's Ray logs (``job_pack``: the GCS server's, dashboard's and monitor's on
    the head, the raylet's and the workers' on every node)."""
    prefix = "/".join(job_pack.RAY_LOGS) + "/"
    lines = []
    for bundle in bundles:
        names = {n.rsplit(".", 1)[0] for n in bundle.files if "/" not in n}
        drivers = sorted(n for n in names if n.startswith("driver-") and f"{n}.sh" in bundle.files)
        for name in sorted(n for n in names if n.startswith("raynode-")):
            if f"{name}.out" in bundle.files and f"{name}.sh" not in bundle.files:
                runner = drivers[0] if drivers else "the driver"
                lines.append(
                    f"  {bundle.host} {name} (Ray head, run in {runner}'s script): "
                    f"its output {name}.out/.err"
                )
        ray = [n[len(prefix) :] for n in bundle.files if n.startswith(prefix)]
        if ray:
            workers = sum(1 for n in ray if n.startswith("worker-"))
            lines.append(
                f"  {bundle.host} Ray's logs: hosts/{bundle.host}/{prefix} "
                f"({len(ray)} files, {workers} of them the workers' output)"
            )
    return lines


def compose_summary(
    record: JobRecord, bundles: Sequence[HostBundle], validated: Mapping[str, str] | None = None
) -> str:
    by_host = {b.host: b for b in bundles}
    leader = record.hosts[0] if record.hosts else None
    truth = by_host[leader].json("supervisor.json") if leader in by_host else None
    lines = summary_lines(record, truth, validated)
    captures = {
        f"{b.host}/{name[len('hang/') : -len('.json')]}": b.json(name) or {}
        for b in bundles
        for name in b.files
        if name.startswith("hang/") and name.endswith(".json") and name.count("/") == 1
    }
    stuck = stuck_rank(captures)
    if stuck is not None:
        host, name = stuck.split("/", 1)
        capture = captures[stuck]
        states = ", ".join(
            f"pid {p.get('pid')} {p.get('state_name', p.get('state'))}"
            + (f" in {p['wchan']}" if p.get("wchan") else "")
            for p in capture.get("processes") or []
        )
        lines.append(f"stuck: {host} {name} rank {capture.get('rank')}: {states or '?'}")
        step = capture.get("last_step") or {}
        if step:
            lines.append(f"  its last step: {step.get('step')} ({step.get('line', '')})")
        stack = by_host[host].text(f"hang/{name}.stack.txt").splitlines()
        if stack:
            lines.append(f"  top of its stack (hosts/{host}/hang/{name}.stack.txt):")
            lines += ["    " + line for line in stack[:STACK_LINES]]
    # Per-rank busy/wait in the leader's last window, and every slow spell (issue 32).
    pace = pace_source(record.host_view, truth)
    lines += pace_lines(pace) + period_lines(pace)
    notes = spare_notes(with_spares(record.host_view, record.plan), truth or {})
    processes = process_lines(bundles, notes) + ray_lines(bundles)
    if processes:
        lines.append("processes:")
        lines += processes
    for bundle in bundles:
        if bundle.error:
            lines.append(f"{bundle.host}: {bundle.error}")
        for cut in bundle.manifest.get("truncated", []):
            lines.append(
                f"{bundle.host}: {cut['file']} truncated: its last {cut['kept']} of "
                f"{cut['bytes']} bytes kept"
            )
        for skip in bundle.manifest.get("skipped", []):
            why = skip.get("error") or f"{skip.get('bytes')} bytes, over the host's limit"
            lines.append(f"{bundle.host}: {skip['file']} not included ({why})")
    lines.append("")
    lines.append("files: plan.json, timeline.txt, hosts/HOST/ (NAME.sh: exact command and env)")
    return "\n".join(lines) + "\n"
