"""The console's side of the host supervisors (``console/hostprogs/supervisor/program.py``).

What each host's supervisor is started with (its config, the job's secret, its source),
and what the console makes of what the supervisors recorded: the job's state and first
failure. The policy itself runs on the hosts (``hostprogs/supervisor/policy.py``); the
console only reads its verdict, or applies the same policy when no supervisor watches.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from console.hostprogs.supervisor.policy import JobPolicy, PolicyProcess
from console.hostprogs.supervisor.source import supervisor_source
from console.inventory import Host
from console.jobs.models import JobPlan, JobState, RankLaunch
from console.jobs.ssh import remote_ops
from console.jobs.ssh.job import Job, JobFailure
from console.jobs.ssh.jobctl_reports import SupervisorRecord

HEARTBEAT_S = 1.0
SILENCE_S = 4.0  # a host whose supervisor is silent this long is lost
CONNECT_S = 30.0  # a follower's supervisor not connected this long after the start is lost
POLL_S = 0.25
POLICY_SETTLE_S = 5.0  # after a silent host and the grace: the verdict written and read


def new_secret() -> str:
    """The job's secret: only its hosts hold it (0600 in the job directory)."""
    return secrets.token_hex(32)


def supervised_hosts(plan: JobPlan) -> list[str]:
    """Hosts that start processes, in plan order; the first is the leader."""
    return list(dict.fromkeys(launch.host for launch in plan.launches))


def training_address(host: Host) -> str:
    """Where the other hosts reach this one (the inventory address the ranks use)."""
    return "127.0.0.1" if host.is_local else host.address


def _own_files(launch: RankLaunch, job_dir: str) -> list[str]:
    own = remote_ops.own_output(launch, job_dir)
    return [own.stdout] + ([own.stderr] if own.stderr is not None else [])


def supervisor_spec(
    plan: JobPlan,
    host: str,
    *,
    leader: Host,
    leader_port: int | None,
    secret: str,
    grace_s: float,
) -> dict[str, Any]:
    """The ``supervisor`` section of ``jobctl start``'s payload for ``host``."""
    processes = []
    for (proc_host, name), launch in remote_ops.process_names(plan).items():
        job_dir = remote_ops.host_job_dir(plan, proc_host)
        processes.append(
            {
                "host": proc_host,
                "name": name,
                "role": launch.role,
                "ranks": list(launch.ranks),
                # Only the files on this host: a rank's stderr elsewhere is read by the
                # console (watch.py), on the host that holds it.
                "logs": remote_ops.tail_paths_by_host(launch, job_dir).get(host, [])
                if proc_host == host
                else [],
                # A ps worker's steps are read from its own output (hostprogs/pace/steps.py).
                "index": launch.index,
                "output": _own_files(launch, job_dir) if proc_host == host else [],
            }
        )
    config = {
        "job_id": plan.job_id,
        "host": host,
        "leader": leader.name,
        "leader_address": training_address(leader),
        "leader_port": leader_port,
        # The leader's port listens there only, not on every address (where it is the
        # leader host's own; guarded_listener.py falls back and says why otherwise).
        "bind": training_address(leader) if host == leader.name else "",
        "kind": plan.kind.value,
        "fail_fast": plan.fail_fast,
        "grace": grace_s,
        "heartbeat_s": HEARTBEAT_S,
        "silence_s": SILENCE_S,
        "connect_s": CONNECT_S,
        "poll_s": POLL_S,
        "hang_timeout": plan.hang_timeout,
        "stop_on_hang": plan.stop_on_hang,
        "max_restarts": plan.max_restarts,
        # Per-rank pace (hostprogs/pace/hook.py): the slow-rank threshold.
        "pace": {"threshold": plan.slow_threshold} if plan.slow_threshold else {},
        "exclude_slow_s": plan.exclude_slow * 60 if plan.exclude_slow else 0,
        "min_hosts": plan.min_hosts,  # elastic (ddp, Horovod): a lost host above it is a scale-down
        # --rendezvous-host: the leader's host; its store's port tells followers it lives.
        "rendezvous_host": plan.rendezvous_host,
        "rendezvous_address": plan.master_addr if plan.rendezvous_host else None,
        "rendezvous_port": plan.master_port if plan.rendezvous_host else None,
        "name": plan.name,
        # Only the leader's supervisor notifies: the others never hold the webhook's secret.
        "notify": dataclasses.asdict(plan.notify)
        if plan.notify is not None and host == leader.name
        else None,
        "processes": processes,
    }
    return {"config": config, "secret": secret, "source": supervisor_source()}


def console_policy(job: Job) -> JobPolicy:
    """The job's policy for the console to apply when no supervisor watches the job."""
    procs = [
        PolicyProcess(p.host, p.name, p.launch.role, tuple(p.launch.ranks))
        for p in job.processes.values()
    ]
    return JobPolicy(procs, job.plan.kind.value, job.plan.fail_fast)


@dataclass(frozen=True, slots=True)
class Verdict:
    state: JobState
    failure: JobFailure | None
    ended: float | None


def verdict(job: Job, records: Mapping[str, SupervisorRecord]) -> Verdict | None:
    """The job's final state as its supervisors recorded it, or None while it runs.

    The leader's record is the job's truth; when the leader is gone (its host lost), a
    follower that judged alone has the word."""
    leader = next((r for r in records.values() if r.leader), None)
    chosen = leader if leader is not None and leader.final else None
    if chosen is None:
        chosen = next((r for r in records.values() if not r.leader and r.final), None)
        if chosen is not None and leader is not None and leader.alive:
            return None  # the leader still decides
    if chosen is None:
        return None
    return Verdict(JobState(chosen.state), failure_of(job, chosen), chosen.ended_at)


def failure_of(job: Job, record: SupervisorRecord) -> JobFailure | None:
    failure = record.first_failure
    if failure is None or record.state != JobState.FAILED.value:
        return None
    info = job.processes.get((failure.host, failure.process or ""))
    ranks = failure.ranks or (info.launch.ranks if info is not None else ())
    if failure.process is None:
        reason = failure.reason
    elif failure.signal:
        reason = f"killed by {failure.signal}"
    else:
        reason = "" if failure.exit_code is not None else failure.reason
    return JobFailure(
        failure.host,
        failure.process or "",
        tuple(ranks),
        failure.exit_code,
        reason,
        failure.lines,
        failure.first_error,
        failure.at,
    )


def unsupervised(records: Mapping[str, SupervisorRecord]) -> bool:
    """A supervisor was started but none runs any more while the job has not ended."""
    return bool(records) and not any(r.alive for r in records.values())


def unsupervised_hosts(records: Mapping[str, SupervisorRecord]) -> list[str]:
    """Hosts whose supervisor ended before its part of the job did (their training runs
    on; the others' supervisors keep the job), and those the leader's record names."""
    dead = [h for h, r in records.items() if not r.alive and not r.final]
    for record in records.values():
        if record.leader and record.alive:
            dead += [h for h in record.unsupervised if h not in dead]
    return dead
