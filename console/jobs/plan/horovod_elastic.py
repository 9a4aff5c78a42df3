"""Horovod elastic: a horovod job's restarts through Horovod's own driver.

When is a job elastic? When the user says the program uses ``hvd.elastic``:
``--horovod-elastic``, or ``DISTCONSOLE_HOROVOD_ELASTIC=1`` in the job's environment
(``--env``, the form's Environment, or the leader host's ``env`` in hosts.yaml), with

- ``--max-restarts R`` of at least 1, and
- the Gloo launcher (``--horovod-launcher gloo``, the default): horovodrun's elastic
  mode has no MPI driver.

An explicit switch, not a guess: a text search of the script for ``hvd.elastic`` would
need the program on the console's machine (it is a path on the hosts) and misreads
imports under other names, and a program not written for it (no committed state to
restore) would silently start over inside the same run. The bundled ``example:horovod``
is written with ``hvd.elastic.run`` and runs either way. Without the switch a horovod
job restarts as an MPI one (its launcher re-run whole, the ranks resuming from their
checkpoints); ``plan`` says which applies (its notes).

Then horovodrun runs ``--host-discovery-script SCRIPT --max-np N --min-np K`` (N: every
slot of the job; K: with ``--min-hosts M`` the slots of the M smallest hosts, else N less
the largest host's slots, so the loss of any one host is survived) with
``--blacklist-cooldown-range 1 2``. Horovod blacklists the host of a failed
worker (for good unless a cooldown is given): the survivors restore their last commit and
go on without it (a reset down to M or more), and once its cooldown is over the host is
discovered again and a new worker started there (a reset back up to N), which syncs the
state from rank 0. So one restart is two of Horovod's resets: ``--reset-limit 2R`` for
``--max-restarts R``. (With ``--min-np N`` Horovod 0.28 never starts the failed slot
again: the host leaves and returns between two assignments, and its slot still reads
active.) SCRIPT is written into the launcher host's job directory when the launcher
starts; it prints ``host:slots`` for each of the job's hosts that the launcher host's
supervisor (the job's leader) still counts in the job: the ``hosts_now`` of its
``supervisor.json`` (the elastic membership record) when there is one, else every
planned host.

The supervisor's process is named ``horovodrun-0`` (not ``launcher-0``): the supervisors
do not re-run it (Horovod resets its workers itself and the launcher ends only when
Horovod gives up, which fails the job as any failure does); they count each reset that
Horovod's log reports as a restart.

With a rendezvous host (``--rendezvous-host H``, issue 31) horovodrun, Horovod's driver,
runs there with no slots of its own (:func:`driver`): the discovery script lists the
training hosts only, the job's leader supervisor is H's, and any training host may be
lost, the first one too. H needs horovod, ssh to the training hosts as the driver's own
(the job's keys: ``distconsole keys``), and a port the training hosts can reach (the
driver's rendezvous server, on the interface ``--network-interface`` names).

A lost host (``--min-hosts M``, the form's Min hosts, hosts.yaml ``min_hosts``): the
launcher host's supervisor, the only one (no other host runs a process of the job), reads
the hosts from ``horovod-hosts.json`` (written beside SCRIPT: each host's inventory name,
Horovod's name for it and its slots, and the ssh port) and takes a host out of
``hosts_now`` when the console says it is lost (``lost-hosts/HOST``) or when Horovod's
log says a worker there failed and ssh from the launcher host, as Horovod's own, cannot
reach it (``hostprogs/supervisor/elastic.py``): SCRIPT stops listing it, and Horovod goes
on with the hosts left (a scale-down while M remain; below M the job fails).
"""

from __future__ import annotations

import json
import shlex

from console.errors import PlanError
from console.jobs import paths
from console.jobs.models import JobKind
from console.jobs.plan import placement
from console.jobs.plan.mpi_ranks import rank_ranges, ssh_name
from console.jobs.plan.placement import PlacedHost, Placement, max_restarts
from console.transport.ship import shell_join, shell_word

ROLE = "horovodrun"  # the launcher's process name stem (horovodrun-0)
WRAPPER_NAME = "distconsole-horovodrun"
DISCOVERY_FILE = "horovod-hosts.sh"
HOSTS_FILE = "horovod-hosts.json"  # the hosts, for the leader's supervisor (elastic.py)
LEADER_RECORD = "supervisor.json"  # the leader's (hostprogs/supervisor/local.py SV_STATE)
ELASTIC_VAR = "DISTCONSOLE_HOROVOD_ELASTIC"  # "1": the program uses hvd.elastic
# A failed worker's host is out of the job for a cooldown of Horovod's: the shortest it
# takes (seconds), so the job is whole again at once.
COOLDOWN_S = (1, 2)
# How long the driver waits for every slot after a reset (Horovod's default: 600 s).
ELASTIC_TIMEOUT_S = 300

NOTE = (
    "restarts through Horovod elastic (--horovod-elastic): a failed rank's host leaves the "
    "job for its cooldown (2 s) and its worker is started again; every rank goes on from "
    "the last committed state"
)

# Run by horovodrun on the launcher host about once a second: argv[1] the leader's
# record, then one NAME=HOST:SLOTS per planned host, in rank order.
_DISCOVER_PY = """\
import json, sys
try:
    with open(sys.argv[1]) as handle:
        now = json.load(handle).get("hosts_now")
except (OSError, ValueError, AttributeError):
    now = None
for entry in sys.argv[2:]:
    name, host = entry.split("=", 1)
    if not now or name in now:
        print(host)
"""


def asked(p: Placement) -> bool:
    """The user says the program uses hvd.elastic: ``--horovod-elastic``, or
    ``DISTCONSOLE_HOROVOD_ELASTIC=1`` in the job's env or the leader host's (hosts.yaml)."""
    if p.spec.horovod_elastic:
        return True
    value = p.spec.env.get(ELASTIC_VAR, p.first.host.env.get(ELASTIC_VAR, ""))
    return value.strip().lower() in ("1", "true", "yes")


def uses_elastic(p: Placement) -> bool:
    """Whether the job runs under Horovod elastic (see the module doc)."""
    spec = p.spec
    return (
        spec.kind is JobKind.HOROVOD
        and spec.horovod_launcher == "gloo"
        and max_restarts(p) > 0
        and asked(p)
    )


def check_restarts(p: Placement) -> None:
    """``--horovod-elastic`` with no restarts (none given, none in hosts.yaml) would run
    plain horovodrun without a word: refused, naming the option."""
    if p.spec.kind is JobKind.HOROVOD and p.spec.horovod_elastic and not max_restarts(p):
        raise PlanError(
            "--horovod-elastic needs --max-restarts N of at least 1 (Horovod's resets); "
            "neither the job nor the leader host's max_restarts in hosts.yaml gives any"
        )


def why_not(p: Placement) -> str | None:
    """For a horovod job with restarts that is not elastic: why, for the plan's notes."""
    spec = p.spec
    if spec.kind is not JobKind.HOROVOD or not max_restarts(p) or uses_elastic(p):
        return None
    if not asked(p):
        reason = "--horovod-elastic says the program uses hvd.elastic"
    else:
        reason = "horovodrun --mpi has no elastic mode; use --horovod-launcher gloo"
    return f"restarts re-run horovodrun whole (Horovod elastic: {reason})"


def driver(p: Placement) -> PlacedHost:
    """The host horovodrun runs on: the rendezvous host (no slots of its own), else the
    first host. A rendezvous host needs Horovod elastic: plain horovodrun and mpirun run
    their first rank's host's part of the job themselves."""
    if p.rendezvous is None:
        return p.first
    if not uses_elastic(p):
        why = why_not(p) or "--horovod-elastic with --max-restarts N of at least 1"
        raise PlanError(
            f"--rendezvous-host {p.rendezvous.name} applies to ddp and to Horovod elastic "
            f"only; this job is not under Horovod elastic ({why})"
        )
    return p.rendezvous


def discovery_script(p: Placement) -> str:
    """The text of the discovery script (see the module doc)."""
    job_dir = driver(p).job_dir
    entries = [f"{h.name}={ssh_name(p, h)}:{len(ranks)}" for h, ranks in rank_ranges(p)]
    record = shell_word(f"{job_dir}/{LEADER_RECORD}")
    python = shlex.quote(driver(p).host.python or "python3")
    return "\n".join(
        [
            "#!/bin/sh",
            f"# distconsole job {p.job_id}: Horovod elastic's host discovery",
            "# (console/jobs/plan/horovod_elastic.py): HOST:SLOTS per host in the job.",
            # -S: no site (no sitecustomize of the job's: this runs every second).
            f"exec {python} -S -c {shlex.quote(_DISCOVER_PY)} {record} "
            + " ".join(shlex.quote(e) for e in entries),
        ]
    )


def note(p: Placement) -> str:
    """The plan's note for an elastic job: restarts, and the ranks it goes on with."""
    floor = min_hosts(p)
    if floor:
        fewest = (
            f"--min-hosts {floor}: a lost host leaves the job while {floor} of "
            f"{len(p.hosts)} hosts remain (horovodrun --min-np {min_np(p)}, the slots of "
            f"the {floor} smallest hosts); below that the job fails"
        )
    else:
        fewest = (
            f"horovodrun --min-np {min_np(p)} (all slots but the largest host's); "
            "--min-hosts M takes a lost host out of the job"
        )
    return f"{NOTE}; {fewest}"


def first_host_notes(p: Placement) -> tuple[str, ...]:
    """The one host an elastic job cannot lose: the launcher's, with Horovod's driver
    (the rendezvous host's when there is one)."""
    if p.rendezvous is not None:
        name = p.rendezvous.name
        return (
            f"rendezvous host: {name} runs horovodrun (Horovod's driver, the job's "
            f"rendezvous) with no slots of its own and the job's leader supervisor, and "
            f"trains nothing: any training host may be lost; losing {name} ends the job",
        )
    return (placement.first_host_note(p, "horovodrun (Horovod's driver, its rendezvous)"),)


def min_hosts(p: Placement) -> int:
    """The hosts an elastic job goes on with (0: none said): --min-hosts, else the
    leader host's ``min_hosts`` (hosts.yaml), checked against the job's hosts. A horovod
    job that is not elastic refuses an explicit --min-hosts."""
    if not uses_elastic(p):
        wanted = p.spec.min_hosts
        if p.spec.kind is JobKind.HOROVOD and wanted is not None:
            reason = why_not(p) or "--horovod-elastic and --max-restarts N of at least 1"
            raise PlanError(
                f"--min-hosts {wanted} applies to a horovod job under Horovod elastic only "
                f"(horovodrun --min-np); this one is not: {reason}"
            )
        return 0
    return placement.min_hosts(p, max_restarts(p))


def min_np(p: Placement) -> int:
    """The fewest ranks the job goes on with: with --min-hosts M the slots of the M
    smallest hosts (any M hosts left run at least that many), else all but the largest
    host's (one host lost)."""
    floor = min_hosts(p)
    if floor:
        return sum(sorted(h.slots for h in p.hosts)[:floor])
    if len(p.hosts) < 2:
        return p.total_slots
    return max(1, p.total_slots - max(h.slots for h in p.hosts))


def hosts_file(p: Placement, ssh_port: str | None) -> str:
    """``horovod-hosts.json``: the job's hosts as the leader's supervisor needs them
    (inventory name, Horovod's name for it, slots) and the ssh port Horovod uses."""
    hosts = [{"name": h.name, "horovod": ssh_name(p, h), "slots": h.slots} for h in p.hosts]
    return json.dumps({"hosts": hosts, "ssh_port": ssh_port}, sort_keys=True)


def elastic_options(p: Placement) -> list[str]:
    low, high = COOLDOWN_S
    return [
        "--min-np", str(min_np(p)), "--max-np", str(p.total_slots),
        "--reset-limit", str(2 * max_restarts(p)),
        "--blacklist-cooldown-range", str(low), str(high),
        "--elastic-timeout", str(ELASTIC_TIMEOUT_S),
        # The driver's resets in its log: the supervisor counts them as restarts.
        "--log-level", "INFO",
    ]  # fmt: skip


def launcher_argv(horovodrun: list[str], program: tuple[str, ...], p: Placement) -> tuple[str, ...]:
    """``bash -c SCRIPT``: write the discovery script, then exec horovodrun with it.

    ``horovodrun`` is its argv up to the host options (``-H`` is left out: the script
    names the hosts)."""
    path = shell_word(f"{driver(p).job_dir}/{DISCOVERY_FILE}")
    hosts = shell_word(f"{driver(p).job_dir}/{HOSTS_FILE}")
    port = horovodrun[horovodrun.index("-p") + 1] if "-p" in horovodrun else None
    lines = [
        f"# distconsole job {p.job_id}: Horovod elastic (console/jobs/plan/horovod_elastic.py)",
        f"f={path}",
        f"(umask 077; printf '%s\\n' {shlex.quote(discovery_script(p))} >\"$f\") || exit 1",
        'chmod 700 "$f" || exit 1',
        f"(umask 077; printf '%s\\n' {shlex.quote(hosts_file(p, port))} >{hosts}) || exit 1",
        f'exec {shell_join(horovodrun)} --host-discovery-script "$f" '
        + " ".join(shlex.quote(o) for o in elastic_options(p))
        + f" --gloo {shell_join(program)}",
    ]
    return ("bash", "-c", "\n".join(lines), WRAPPER_NAME)


def process_files(job_dir: str) -> tuple[str, str]:
    """The launcher's own stdout and stderr."""
    return paths.process_stdout(job_dir, ROLE, 0), paths.process_stderr(job_dir, ROLE, 0)
