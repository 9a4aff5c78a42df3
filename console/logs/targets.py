"""What to follow on each host: from a job's plan, or by listing the job directory.

With a plan every log file is known with its attribution; the job directory is not
listed (torchrun's ``--log-dir`` copies of the ``--tee`` output would come twice).
Without one (a job started elsewhere, or history lost) each host's job directory is
listed for the process and per-rank output files of ``console/jobs/paths.py``'s layout.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from console.inventory import Host
from console.jobs import paths
from console.jobs.models import JobPlan, RankLaunch
from console.logs.follower import FollowTarget
from console.logs.prefixes import FileContext, context_for

# torchrun/<run>/attempt_N/<local>/stdout.log repeat the --tee output: not listed.
LISTING_PATTERNS = ("*.out", "*.err", "stdout", "stderr")


def targets_from_plan(plan: JobPlan, hosts: Iterable[str] | None = None) -> list[FollowTarget]:
    """One target per host that has log files in the plan (optionally only ``hosts``)."""
    wanted = set(hosts) if hosts is not None else None
    files: dict[str, list[FileContext]] = defaultdict(list)
    launches: dict[str, list[RankLaunch]] = defaultdict(list)
    for launch in plan.launches:
        if wanted is not None and launch.host not in wanted:
            continue
        launches[launch.host].append(launch)
        for log in launch.log_paths:
            files[launch.host].append(context_for(plan.job_id, launch.host, log, launch))
    targets = []
    for host, contexts in files.items():
        job_dir = plan.job_dirs.get(host)
        done = (
            tuple(
                paths.exit_file(job_dir, paths.process_name(launch.role, launch.index))
                for launch in launches[host]
            )
            if job_dir
            else ()
        )
        node_ranks = next((la.ranks for la in launches[host] if la.ranks), ())
        targets.append(
            FollowTarget(
                plan.job_id,
                host,
                files=tuple(contexts),
                done_markers=done,
                node_ranks=node_ranks,
            )
        )
    return targets


def targets_from_listing(job_id: str, hosts: Iterable[Host]) -> list[FollowTarget]:
    """Targets that list each host's job directory (no plan at hand; no done markers, so
    a follow ends with Ctrl-C)."""
    return [
        FollowTarget(
            job_id,
            host.name,
            dirs=(paths.job_dir(host.work_dir, job_id),),
            patterns=LISTING_PATTERNS,
        )
        for host in hosts
    ]
