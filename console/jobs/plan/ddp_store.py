"""The rendezvous host's process of a ddp job (``--rendezvous-host``, issue 31): our
store program (hostprogs/rendezvous_store.py: torch's ``TCPStore`` as the c10d
rendezvous backend serves it) on the master port, started before the agents: the
plan's first launch, so that its host is the job's leader everywhere that takes the
first launch's host (supervision.supervised_hosts, history, the report).
"""

from __future__ import annotations

from console.jobs import paths
from console.jobs.models import LogFile, RankLaunch, Upload
from console.jobs.plan.placement import PlacedHost, Placement, distconsole_env
from console.jobs.plan.rendezvous import ROLE

PROGRAM = "rendezvous_store.py"  # in console.hostprogs, uploaded to the job directory
ROUND_FILE = "rendezvous-round.json"  # hostprogs/rendezvous_store.py ROUND_FILE
HOSTS_FILE = "rendezvous-hosts.json"  # supervisor/rendezvous.py SV_STORE_HOSTS


def store_launch(p: Placement, rdzv: PlacedHost, floor: int = 0) -> RankLaunch:
    """``python rendezvous_store.py --address A --port P --run-id JOB``: the host's Python
    (it imports torch), with the job's own variables only. Elastic (``floor``: the
    job's --min-hosts), it also reads the leader's suspects from ``HOSTS_FILE`` and
    knows each agent's ``--local-addr``, to cut a scale-down short (its module doc)."""
    job_dir = rdzv.job_dir
    elastic: tuple[str, ...] = ()
    if floor:
        elastic = ("--hosts-file", f"{job_dir}/{HOSTS_FILE}", "--min-nodes", str(floor))
        elastic += ("--max-nodes", str(len(p.hosts)))  # torchrun's --nnodes M:N
        for ph in (*p.hosts, *p.spares):
            elastic += ("--agent", f"{ph.name}={ph.address}")
    argv = (
        rdzv.host.python,
        f"{job_dir}/{PROGRAM}",
        "--address",
        rdzv.address,
        "--port",
        str(p.master_port),
        "--run-id",
        p.job_id,
        "--round-file",
        f"{job_dir}/{ROUND_FILE}",
        *elastic,
    )
    env = {
        "PYTHONUNBUFFERED": "1",
        **rdzv.host.env,  # where the host's torch is found (PYTHONPATH, LD_LIBRARY_PATH)
        **distconsole_env(p.job_id, job_dir, p.total_slots, None, None),
    }
    return RankLaunch(
        host=rdzv.name,
        role=ROLE,
        index=0,
        argv=argv,
        env=env,
        # The host's work_dir (the job's lives under it): --workdir is the training
        # hosts' affair, and the job directory does not exist yet at pre-flight.
        cwd=rdzv.host.work_dir,
        log_paths=(
            LogFile(paths.process_stdout(job_dir, ROLE, 0), "stdout", "launcher"),
            LogFile(paths.process_stderr(job_dir, ROLE, 0), "stderr", "launcher"),
        ),
    )


def store_upload(rdzv: PlacedHost) -> Upload:
    return Upload(
        host=rdzv.name,
        path=f"{rdzv.job_dir}/{PROGRAM}",
        resource=PROGRAM,
        package="console.hostprogs",
    )


def rendezvous_note(p: Placement, rdzv: PlacedHost) -> str:
    """The plan's line in place of first_host_note: who holds what, and the one loss left."""
    return (
        f"rendezvous host: {rdzv.name} holds the job's rendezvous (torch's c10d store on "
        f"port {p.master_port}) and its leader supervisor, and trains nothing: any "
        f"training host may be lost; losing {rdzv.name} ends the job"
    )
