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
    """One target per host that has log files in the plan (optionally only ``hosts``).

    A file is followed on the host it is written on (``LogFile.host``): MPI and Horovod
    ranks write theirs where they run, not on the launcher's host. Only hosts that run a
    planned process have its ``.exit`` files as done markers, and every MPI rank file's
    host its rank's ``done`` marker (written once the rank's output is closed).
    """
    wanted = set(hosts) if hosts is not None else None
    files: dict[str, list[FileContext]] = defaultdict(list)
    launches: dict[str, list[RankLaunch]] = defaultdict(list)
    ranks_on: dict[str, list[int]] = defaultdict(list)
    for launch in plan.launches:
        launches[launch.host].append(launch)
        for log in launch.log_paths:
            where = log.host or launch.host
            if log.host is not None and log.rank is not None and log.stream == "stdout":
                ranks_on[where].append(log.rank)  # a rank that runs where its file is
            if wanted is not None and where not in wanted:
                continue
            files[where].append(context_for(plan.job_id, where, log, launch))
    targets = []
    for host, contexts in files.items():
        job_dir = plan.job_dirs.get(host)
        done: tuple[str, ...] = ()
        states: tuple[str, ...] = ()
        if job_dir:
            states = paths.supervisor_states(job_dir, host)
            done = tuple(
                paths.exit_file(job_dir, paths.process_name(launch.role, launch.index))
                for launch in launches.get(host, ())
            ) + tuple(paths.rank_done(job_dir, rank) for rank in ranks_on.get(host, ()))
        node_ranks = tuple(ranks_on.get(host, ())) or next(
            (la.ranks for la in launches.get(host, ()) if la.ranks), ()
        )
        targets.append(
            FollowTarget(
                plan.job_id,
                host,
                files=tuple(contexts),
                done_markers=done,
                supervisor_states=states,
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
