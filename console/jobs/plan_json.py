"""A job's plan as JSON and back: the history's ``plan`` column and job.json's ``plan``.

The plan is stored whole, so a later process (another console, a scan of the hosts) can
re-attach to a job from it alone. A plan written before a field existed reads with that
field's old meaning (absent keys take the defaults below).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from console.jobs.models import JobKind, JobPlan, LogFile, Notify, RankLaunch, Upload


def plan_to_json(plan: JobPlan) -> str:
    return json.dumps(asdict(plan), sort_keys=True)


def plan_from_json(text: str) -> JobPlan:
    data: dict[str, Any] = json.loads(text)
    launches = tuple(
        RankLaunch(
            host=item["host"],
            role=item["role"],
            index=int(item["index"]),
            argv=tuple(item["argv"]),
            env=dict(item["env"]),
            cwd=item["cwd"],
            log_paths=tuple(LogFile(**log) for log in item["log_paths"]),
            ranks=tuple(item.get("ranks", ())),
        )
        for item in data["launches"]
    )
    return JobPlan(
        job_id=data["job_id"],
        name=data["name"],
        kind=JobKind(data["kind"]),
        world_size=int(data["world_size"]),
        launches=launches,
        job_dirs=dict(data["job_dirs"]),
        master_addr=data.get("master_addr"),
        master_port=data.get("master_port"),
        total_steps=data.get("total_steps"),
        steps_per_rank=data.get("steps_per_rank"),
        steps_dropped=data.get("steps_dropped"),
        hosts_involved=tuple(data.get("hosts_involved", ())),
        warnings=tuple(data.get("warnings", ())),
        notes=tuple(data.get("notes", ())),
        uploads=tuple(Upload(**u) for u in data.get("uploads", ())),
        fail_fast=bool(data.get("fail_fast", True)),
        hang_timeout=data.get("hang_timeout"),  # absent: a job from before hang detection
        stop_on_hang=bool(data.get("stop_on_hang", False)),
        max_restarts=int(data.get("max_restarts") or 0),
        min_hosts=int(data.get("min_hosts") or 0),
        rendezvous_host=data.get("rendezvous_host"),
        slow_threshold=data.get("slow_threshold"),
        exclude_slow=data.get("exclude_slow"),
        notify=Notify(
            urls=tuple(data["notify"].get("urls") or ()),
            command=data["notify"].get("command"),
            on=tuple(data["notify"].get("on") or ()),
        )
        if isinstance(data.get("notify"), dict)
        else None,
    )


def plan_hosts(plan: JobPlan) -> tuple[str, ...]:
    """Every host the job touches, in plan order (launch hosts first)."""
    seen: dict[str, None] = {}
    for launch in plan.launches:
        seen.setdefault(launch.host, None)
    for host in plan.hosts_involved:
        seen.setdefault(host, None)
    return tuple(seen)
