"""PyTorch DDP: one ``torchrun`` per host, the first host is the rendezvous master.

Output scheme (checked against torch 2.13's torchrun): ``--tee 3`` makes torchrun copy
every worker's stdout and stderr to its own, each line prefixed ``[default<local
rank>]:``; the runner writes torchrun's stdout/stderr to ``torchrun-<node>.out/.err``
in the job directory, so each host has two predictable files and the prefix plus
``RankLaunch.ranks`` attributes every line to its global rank. ``--log-dir`` points
torchrun's own per-worker copies (in a directory with a random suffix) into the job
directory instead of the host's /tmp.

With ``--max-restarts N`` torchrun restarts the workers itself: ``--max-restarts N``
with the c10d rendezvous (``--rdzv-backend c10d``, the job id as rendezvous id, the
first host's agent holding the store at the master port, each agent announcing its
inventory address with ``--local-addr``). The rendezvous then orders the hosts: which
host holds which global ranks is torch's choice, not the plan's (ranks are per host as
many as planned). The supervisors count those restarts (hostprogs/supervisor/restart.py).

With ``--min-hosts M`` (elastic membership) torchrun runs ``--nnodes M:N``: a lost host
fails the survivors' collective, their agents restart and meet again without it (a
scale-down, one of the ``--max-restarts``). torch's defaults make that slow: a dead
agent stays a participant of the last round until its keep-alive expires
(``keep_alive_interval`` 5 s x ``keep_alive_max_attempt`` 3), then the round waits
``last_call_timeout`` (30 s) for more agents once M have joined: 46 s from a lost host
to the survivors' first step here. :data:`ELASTIC_RDZV_CONF` cuts both (see its
comment), and the supervisors stop the survivors' workers as soon as a host's heartbeats
stop (hostprogs/supervisor/rounds.py) rather than let them wait in a collective for it;
the rendezvous endpoint is the first host's agent, so that host must survive.

``--spare-hosts`` (with ``--min-hosts``) uses torch's own replacement: each spare host
runs a torchrun agent with the same rendezvous (``--nnodes M:N``, N the job's hosts),
gated: it starts only once its supervisor writes its gate file (``spare-go.HOST``),
which the leader's supervisor asks for only when a host was lost (elastic.py). The
agent then joins the wait list of the survivors' round, their agents restart their
workers for it and the next round takes it in. Never before a loss: an agent waiting
beside a full round (torch's redundancy list) leaves it whenever a participant does, so
on a plain restart (a crashed rank) it raced the job's own agents into the next round,
one agent was always left over in the wait list, and the rounds never settled. When
the job ends the supervisors stop a spare still waiting at its gate.
A spare's launch has no ranks: that is how the supervisors tell it (elastic.py).

``--rendezvous-host H`` (issue 31): H trains nothing and runs our store program
(ddp_store.py) on the master port, the plan's first launch; every agent uses the c10d
rendezvous (with or without restarts) at H with ``is_host=0``, so no agent ever hosts
the store and any training host may be lost, the first one too.
"""

from __future__ import annotations

from console.errors import PlanError
from console.jobs import paths
from console.jobs.models import JobKind, JobPlan, LogFile, RankLaunch
from console.jobs.plan.ddp_store import rendezvous_note, store_launch, store_upload
from console.jobs.plan.placement import (
    DEFAULT_PYTHON,
    PlacedHost,
    Placement,
    checkpoint_env,
    distconsole_env,
    example_uploads,
    first_host_note,
    job_env,
    max_restarts,
    min_hosts,
    step_split,
    substitute,
)

ROLE = "torchrun"
# Elastic rendezvous settings (torch 2.13 dynamic_rendezvous.py names). A lost agent stays a
# participant of the last round until its keep-alive expires, and the survivors wait for
# that (bench/recovery.py): 1 s heartbeats, dead after 3 missed (a loaded host's agent
# still beats: its heartbeat is a thread of its own, and an agent taken out by mistake
# joins the next round again). A round with at least M agents closes 2 s after the M-th
# joined: the survivors of a loss, restarting together, join well within that; agents
# started together by jobctl too (a late one joins the next round: torchrun restarts
# the group to take it in). 300 s for the first round (torch imports on a slow shared
# filesystem) instead of 600; 10 s to close the rendezvous at the end. With a rendezvous
# host the store program cuts both short on the leader's word (hostprogs/rendezvous_store).
ELASTIC_RDZV_CONF = (
    "join_timeout=300",
    "last_call_timeout=2",
    "close_timeout=10",
    "keep_alive_interval=1",
    "keep_alive_max_attempt=3",
)
# A spare's agent waits for its gate file (its supervisor writes it), then runs torchrun.
SPARE_GATE = (
    'g=$1; shift; case $g in "~/"*) g=$HOME/${g#"~/"};; esac; '
    'while [ ! -e "$g" ]; do sleep 0.5; done; exec "$@"'
)
SPARE_GATE_FILE = "spare-go"  # + ".HOST" in the spare's job directory (supervisor/elastic.py)
FLIGHT_RECORDER_ENTRIES = 2000  # collectives kept per rank (PyTorch's default is 0: off)
FLIGHT_RECORDER_SIZE = "TORCH_FR_BUFFER_SIZE"
FLIGHT_RECORDER_OLD_SIZE = ("TORCH_NCCL_TRACE_BUFFER_SIZE",)  # torch before 2.8


def torchrun_command(python: str) -> tuple[str, ...]:
    # A host with its own interpreter gets that interpreter's torchrun, not PATH's.
    if python == DEFAULT_PYTHON:
        return ("torchrun",)
    return (python, "-m", "torch.distributed.run")


def script_argv(program: str, example: str | None, job_dir: str) -> tuple[str, ...]:
    """torchrun runs a ``.py`` with Python itself; anything else needs ``--no-python``."""
    if example is not None:
        return (paths.example_path(job_dir, example),)
    if program.endswith(".py"):
        return (program,)
    return ("--no-python", program)


def rendezvous_args(
    p: Placement,
    node_rank: int,
    restarts: int,
    elastic: bool = False,
    local: PlacedHost | None = None,
) -> tuple[str, ...]:
    """Static (fixed node ranks) without restarts or a rendezvous host; c10d with them,
    tuned for losing hosts when elastic (see the module doc). ``local``: the agent's
    host when it is not ``p.hosts[node_rank]`` (a spare)."""
    master = p.rendezvous or p.first
    # With a rendezvous host its store program holds the store: no agent hosts one.
    is_host = 1 if node_rank == 0 and p.rendezvous is None else 0
    if not restarts and p.rendezvous is None:
        return (
            "--node-rank",
            str(node_rank),
            "--master-addr",
            master.address,
            "--master-port",
            str(p.master_port),
        )
    return (
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"{master.address}:{p.master_port}",
        "--rdzv-id",
        p.job_id,
        "--rdzv-conf",
        ",".join((f"is_host={is_host}", *(ELASTIC_RDZV_CONF * elastic))),
        "--local-addr",
        (local or p.hosts[node_rank]).address,
        "--max-restarts",
        str(restarts),
    )


def plan_ddp(p: Placement) -> JobPlan:
    spec = p.spec
    nnodes = len(p.hosts)
    world_size = p.total_slots
    steps_per_rank, dropped = step_split(spec.total_steps, world_size)
    args = substitute(
        spec.args,
        {
            "steps_per_rank": steps_per_rank,
            "total_steps": spec.total_steps,
            "world_size": world_size,
        },
    )
    master = p.rendezvous or p.first
    restarts = max_restarts(p)
    floor = min_hosts(p, restarts)
    if p.spares and not floor:
        raise PlanError(
            "--spare-hosts needs --min-hosts M: a spare replaces a lost host of an elastic "
            "job (torchrun --nnodes M:N)"
        )
    launches: list[RankLaunch] = [store_launch(p, p.rendezvous, floor)] if p.rendezvous else []
    first_rank = 0
    agents = [(ph, False) for ph in p.hosts] + [(ph, True) for ph in p.spares]
    for node_rank, (ph, spare) in enumerate(agents):
        gate = (
            ("bash", "-c", SPARE_GATE, "distconsole-spare", spare_gate(ph.job_dir, ph.name))
            if spare
            else ()
        )
        argv = (
            *gate,
            *torchrun_command(ph.host.python),
            "--nnodes",
            f"{floor}:{nnodes}" if floor else str(nnodes),
            "--nproc-per-node",
            str(ph.slots),
            *rendezvous_args(p, node_rank, restarts, bool(floor), ph),
            "--log-dir",
            # With restarts, one folder per host (NAME: torchrun-N): hosts that share a
            # home share the job directory, and the supervisors count their own attempts.
            paths.torchrun_log_dir(ph.job_dir)
            + (f"/{paths.process_name(ROLE, node_rank)}" if restarts or p.rendezvous else ""),
            "--tee",
            "3",
            *script_argv(spec.program, spec.example, ph.job_dir),
            *args,
        )
        defaults = {"OMP_NUM_THREADS": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
        if spec.hang_timeout is not None:
            # PyTorch's flight recorder: the last collectives of each rank, dumped into
            # hang/ when NCCL's watchdog times out (the hang capture lists the dumps).
            # TORCH_FR_BUFFER_SIZE is today's name (the old one prints a deprecation on
            # every rank); the job's sitecustomize renames it where the host's torch is
            # older. A size the user gives under either name wins.
            given = {**ph.host.env, **spec.env}
            if not {FLIGHT_RECORDER_SIZE, *FLIGHT_RECORDER_OLD_SIZE} & given.keys():
                defaults[FLIGHT_RECORDER_SIZE] = str(FLIGHT_RECORDER_ENTRIES)
            defaults.update(
                {
                    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
                    "TORCH_FR_DUMP_TEMP_FILE": paths.flight_recorder_prefix(ph.job_dir),
                }
            )
        if restarts or p.rendezvous:
            # A fresh store for the workers of each round (rank 0's, a new port): the
            # agents' shared store keeps the last round's addresses, and an agent that
            # restarts for a peer's failure gives its workers the old round's prefix.
            defaults["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        if ph.interface:
            defaults["NCCL_SOCKET_IFNAME"] = ph.interface
            defaults["GLOO_SOCKET_IFNAME"] = ph.interface
        fixed = {
            **distconsole_env(p.job_id, ph.job_dir, world_size, spec.total_steps, steps_per_rank),
            **checkpoint_env(spec, ph.job_dir),
            "MASTER_ADDR": master.address,
            "MASTER_PORT": str(p.master_port),
            "WORLD_SIZE": str(world_size),
            "NODE_RANK": str(node_rank),
        }
        logs = (
            LogFile(paths.process_stdout(ph.job_dir, ROLE, node_rank), "stdout", "launcher"),
            LogFile(paths.process_stderr(ph.job_dir, ROLE, node_rank), "stderr", "launcher"),
        )
        launches.append(
            RankLaunch(
                host=ph.name,
                role=ROLE,
                index=node_rank,
                argv=argv,
                env=job_env(ph, spec, defaults=defaults, fixed=fixed),
                cwd=ph.cwd,
                log_paths=logs,
                # A spare's ranks are the rendezvous' choice once it joins: none planned.
                ranks=() if spare else tuple(range(first_rank, first_rank + ph.slots)),
            )
        )
        first_rank += 0 if spare else ph.slots
    return JobPlan(
        job_id=p.job_id,
        name=spec.display_name,
        kind=JobKind.DDP,
        world_size=world_size,
        launches=tuple(launches),
        job_dirs=p.job_dirs,
        master_addr=master.address,
        master_port=p.master_port,
        total_steps=spec.total_steps,
        steps_per_rank=steps_per_rank,
        steps_dropped=dropped,
        hosts_involved=tuple(h.name for h in p.hosts),
        warnings=p.warnings,
        uploads=example_uploads(spec, ((h.name, h.job_dir) for h in (*p.hosts, *p.spares)))
        + ((store_upload(p.rendezvous),) if p.rendezvous else ()),
        fail_fast=spec.fail_fast,
        max_restarts=restarts,
        min_hosts=floor,
        notes=spare_notes(p) + first_host_notes(p, floor, nnodes),
        rendezvous_host=p.rendezvous.name if p.rendezvous else None,
    )


def first_host_notes(p: Placement, floor: int, nnodes: int) -> tuple[str, ...]:
    """An elastic job's one host it cannot lose (the module doc): the rendezvous host,
    else the first host (its agent's store)."""
    if p.rendezvous is not None:
        return (rendezvous_note(p, p.rendezvous),)
    if not floor or nnodes < 2:
        return ()
    return (first_host_note(p, "the rendezvous (torchrun's c10d store)"),)


def spare_gate(job_dir: str, host: str) -> str:
    return f"{job_dir}/{SPARE_GATE_FILE}.{host}"


def spare_notes(p: Placement) -> tuple[str, ...]:
    if not p.spares:
        return ()
    names = ", ".join(h.name for h in p.spares)
    return (
        f"spare hosts: {names} (a torchrun agent each, started once the first round "
        f"formed, waiting in the rendezvous without GPU work to replace a lost host)",
    )
