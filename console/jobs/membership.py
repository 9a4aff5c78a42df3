"""Elastic membership as the console reads it (ddp ``--min-hosts``, ``--spare-hosts``).

Pure functions of a plan and of a host view (``JobRecord.host_view``,
``report/discover.py`` ``DiscoveredJob.view``) or the leader's ``supervisor.json``, which
carry the leader's ``scale_downs`` (host, cause, at, hosts_now, hosts_total),
``spare_hosts`` and ``joins`` (host, at, hosts_now): the job's hosts (not its spares),
the hosts in it now, ``3 of 4 hosts``, and which lost host each spare that joined
replaced. ``jobs --json``, the jobs table and screen, and the report read them here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from console.jobs.models import JobKind, JobPlan

# A spare joins the round that leaves the lost host out; the leader may decide that
# host's scale-down only once that round formed (a host killed whole: torchrun's round
# settles it), so its scale-down can come a little after the join.
REPLACE_WINDOW_S = 60.0


def plan_spares(plan: JobPlan) -> tuple[str, ...]:
    """ddp ``--spare-hosts``: the hosts whose torchrun launch holds no ranks (the rule the
    supervisors use, ``hostprogs/supervisor/elastic.py``), in plan order. A plan where no
    launch holds ranks (one from before ranks were recorded) has none."""
    if plan.kind is not JobKind.DDP or not any(la.ranks for la in plan.launches):
        return ()
    spares = (la.host for la in plan.launches if la.role == "torchrun" and not la.ranks)
    return tuple(dict.fromkeys(spares))


def spares_of(view: Mapping[str, Any] | None, plan: JobPlan | None = None) -> list[str]:
    """The planned spares: the leader's record's, else the plan's."""
    named = [str(h) for h in (view or {}).get("spare_hosts") or ()]
    return named or list(plan_spares(plan) if plan is not None else ())


def with_spares(view: Mapping[str, Any] | None, plan: JobPlan) -> dict[str, Any]:
    """``view`` with ``spare_hosts`` filled from the plan when the hosts were not read yet
    (and the plan's ``rendezvous_host``, which trains nothing)."""
    rendezvous = (view or {}).get("rendezvous_host") or plan.rendezvous_host
    return {**(view or {}), "spare_hosts": spares_of(view, plan), "rendezvous_host": rendezvous}


def joined(view: Mapping[str, Any] | None) -> list[str]:
    """The spares that joined the job, in the order they joined."""
    joins = (view or {}).get("joins") or ()
    return list(dict.fromkeys(str(j.get("host")) for j in joins if isinstance(j, Mapping)))


def job_hosts(hosts: Sequence[str], view: Mapping[str, Any] | None) -> list[str]:
    """The job's hosts, not its spares (--spare-hosts: planned, but outside the job
    until one joins) nor its rendezvous host (--rendezvous-host: trains nothing)."""
    spares = {*spares_of(view), (view or {}).get("rendezvous_host")}
    return [h for h in hosts if h not in spares]


def hosts_now(hosts: Sequence[str], view: Mapping[str, Any] | None) -> list[str]:
    """The job's hosts less those its supervisors took out (a scale-down, --min-hosts),
    with the spares that joined (--spare-hosts)."""
    downs = (view or {}).get("scale_downs") or ()
    gone = {str(down.get("host")) for down in downs if isinstance(down, Mapping)}
    came = set(joined(view))
    spares = set(spares_of(view))
    trains = set(job_hosts(hosts, view)) | spares  # not the rendezvous host
    return [h for h in hosts if h in trains and h not in gone and (h not in spares or h in came)]


def membership(hosts: Sequence[str], view: Mapping[str, Any] | None) -> str:
    """``3 of 4 hosts`` once a scale-down took some out (or a spare joined), else ``""``."""
    now = hosts_now(hosts, view)
    total = len(job_hosts(hosts, view))
    changed = len(now) < total or bool((view or {}).get("joins"))
    return f"{len(now)} of {total} hosts" if changed else ""


def replacements(
    downs: Iterable[Mapping[str, Any]], joins: Iterable[Mapping[str, Any]]
) -> list[tuple[Mapping[str, Any], Mapping[str, Any] | None]]:
    """Each join (``host``, ``at``) with the scale-down (``host``, ``at``, ``cause``) it
    made up for, or None: the earliest scale-down not yet made up for that the leader
    decided before the join or within ``REPLACE_WINDOW_S`` after it. The leader records
    no such link: torch's rendezvous takes a waiting spare in the round after a host
    leaves, so the order of the two lists pairs them."""
    waiting = sorted((d for d in downs if isinstance(d, Mapping)), key=_at)
    paired: list[tuple[Mapping[str, Any], Mapping[str, Any] | None]] = []
    for join in sorted((j for j in joins if isinstance(j, Mapping)), key=_at):
        match = next((d for d in waiting if _at(d) <= _at(join) + REPLACE_WINDOW_S), None)
        if match is not None:
            waiting.remove(match)
        paired.append((join, match))
    return paired


def _at(item: Mapping[str, Any]) -> float:
    at = item.get("at")
    return float(at) if isinstance(at, int | float) else 0.0
