"""Job options shared by ``distconsole plan`` and ``distconsole launch``.

``distconsole plan HOSTS [options] -- PROGRAM [ARGS...]``: argparse cannot mix a
leading positional, options and a trailing free-form command in one parser (a ``*``
positional is consumed empty at the first chunk; REMAINDER swallows the options), so
:func:`register_job_command` gives the sub-command ``HOSTS`` plus the raw rest, and
:func:`parse_job_args` parses the options before ``--`` with a parser built by
:func:`add_job_options` and keeps everything after ``--`` verbatim as the program.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from console.commands.parts import options
from console.errors import JobSpecError
from console.jobs.spec import CLI_OPTION, JobSpec, make_spec
from console.jobs.spec_env import job_environment

KINDS = ("ddp", "mpi", "horovod", "ps", "ray")


def add_job_options(parser: argparse.ArgumentParser) -> None:
    """The options of a job spec. Values stay text: the spec validates and names them."""
    parser.add_argument("--kind", metavar="KIND", help="ddp, mpi, horovod, ps or ray (required)")
    parser.add_argument(
        "--hosts",
        dest="select_hosts",
        metavar="A,B",
        help="host names, comma-separated, in rank order (default: all)",
    )
    parser.add_argument(
        "--tag", dest="tags", action="append", default=[], metavar="T", help="hosts with tag T"
    )
    parser.add_argument("--gpus-per-host", metavar="N", help="slots per host (default: its GPUs)")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="K=V|K",
        help="environment (repeatable); NAME alone passes this console's own value of NAME, "
        "so a secret stays out of the command line",
    )
    parser.add_argument(
        "--env-file",
        action="append",
        default=[],
        metavar="FILE",
        help="NAME=VALUE lines (# comments; NAME alone: this console's value), read before "
        "--env (repeatable); the values reach the hosts in private files, never in an argv",
    )
    parser.add_argument("--name", help="job name (default: derived from kind and program)")
    parser.add_argument("--total-steps", metavar="N", help="step budget split over the ranks")
    parser.add_argument("--ps", metavar="N", help="ps kind: number of ps tasks (default 1)")
    parser.add_argument("--workers", metavar="N", help="ps kind: workers (default: one per host)")
    parser.add_argument("--chief", action="store_true", help="ps kind: add a chief task")
    parser.add_argument("--master-port", metavar="PORT", help="default: a free port")
    parser.add_argument(
        "--ray-object-store",
        metavar="SIZE",
        help="ray kind: each node's object store (e.g. 2G; default: Ray's share of memory)",
    )
    parser.add_argument(
        "--ray-dashboard-host",
        metavar="ADDR",
        help="ray kind: where the head's dashboard listens (default 127.0.0.1)",
    )
    parser.add_argument(
        "--ray-dashboard-port", metavar="PORT", help="ray kind: default the master port + 1"
    )
    parser.add_argument("--interface", metavar="IF", help="network interface (e.g. eth0)")
    parser.add_argument(
        "--net",
        metavar="auto|tcp|ib|roce",
        help="network preset: NCCL/Gloo/Open MPI variables for the fabric (default auto: "
        "nothing forced); --env and the inventory's env win over it",
    )
    parser.add_argument(
        "--ib-hca", metavar="HCAS", help="NCCL_IB_HCA for --net ib/roce (e.g. mlx5_0,mlx5_1)"
    )
    parser.add_argument("--workdir", metavar="DIR", help="working directory on the hosts")
    parser.add_argument(
        "--horovod-launcher", metavar="gloo|mpi", help="horovodrun --gloo or --mpi (default gloo)"
    )
    parser.add_argument(
        "--sync",
        metavar="DIR",
        help="put this local directory on every host first (only changed files travel, "
        ".gitignore respected); the program and a relative --workdir resolve inside it",
    )
    parser.add_argument(
        "--sync-max-size", metavar="SIZE", help="refuse a larger --sync tree (default 2G)"
    )
    parser.add_argument(
        "--sync-max-file", metavar="SIZE", help="refuse a larger file in --sync (default 500M)"
    )
    parser.add_argument(
        "--no-fail-fast",
        action="store_true",
        help="keep the other ranks running when one fails",
    )
    parser.add_argument(
        "--hang-timeout",
        metavar="S",
        help="mark the job hung after S seconds without a new log line while its processes "
        "live, and capture every rank's stacks (default 300; 0 or off: no hang check)",
    )
    parser.add_argument(
        "--stop-on-hang",
        action="store_true",
        help="stop a hung job after its capture (it ends failed, cause hung)",
    )
    parser.add_argument(
        "--slow-threshold",
        type=float,
        metavar="X",
        help="name a rank slow once its busy time (ps: a worker's step time) is X times "
        "the median's for 2 windows of 15 s in a row (default: the leader host's "
        "slow_threshold, else 1.3; docs/slow-ranks.md)",
    )
    parser.add_argument(
        "--exclude-slow",
        type=float,
        metavar="MINUTES",
        help="ddp with --min-hosts: drain a host (not the first) whose rank stays slow "
        "this many minutes, as a host with a failing GPU is: a scale-down",
    )
    parser.add_argument(
        "--notify",
        action="append",
        default=[],
        metavar="URL",
        help="POST the job's events as JSON (a Slack-style 'text' line plus job, event, "
        "state, reason, host) to this webhook, from the leader host, with no console "
        "open; repeatable (default: the leader host's notify from the inventory)",
    )
    parser.add_argument(
        "--notify-command",
        metavar="CMD",
        help="run CMD on the leader host for each event, with DISTCONSOLE_JOB, _EVENT, "
        "_STATE, _REASON, _HOST and _TEXT set (e.g. apprise, mail or curl there)",
    )
    parser.add_argument(
        "--notify-on",
        metavar="EVENTS",
        help="which events notify, comma-separated: failed, hung, succeeded, stopped, "
        "restarted, drained, scaled-down, replaced (default failed,hung,succeeded)",
    )
    parser.add_argument(
        "--max-restarts",
        type=int,
        metavar="N",
        help="restart a failed job up to N times through its engine: ddp torchrun's "
        "restarts (c10d rendezvous), mpi/horovod mpirun re-run by the launcher host's "
        "supervisor, ps a failed worker restarted in place; each restarted process gets "
        "DISTCONSOLE_RESTART_COUNT (default: the leader host's max_restarts, else 0)",
    )
    parser.add_argument(
        "--min-hosts",
        type=int,
        metavar="M",
        help="ddp: go on with the hosts left while at least M remain (torchrun --nnodes "
        "M:N); a lost host is a scale-down, the survivors resume from their checkpoint. "
        "Needs --max-restarts of at least 1; the first host (the rendezvous) must "
        "survive unless --rendezvous-host names another (default: the leader host's "
        "min_hosts, else off)",
    )
    parser.add_argument(
        "--spare-hosts",
        metavar="A,B",
        help="ddp with --min-hosts: hosts (not the job's) whose torchrun agent starts at "
        "launch and waits, holding no GPU work, to replace a lost host (torchrun's "
        "rendezvous takes it in: the job scales up again)",
    )
    parser.add_argument(
        "--rendezvous-host",
        metavar="HOST",
        help="ddp (and horovod with --horovod-elastic): a host of the inventory that "
        "trains nothing (a login node, this machine through address: local) holds the "
        "job's rendezvous and its leader supervisor, so any training host may be lost; "
        "ddp needs Python with torch there for the c10d store, no GPU (default: the "
        "leader host's rendezvous_host, else the first host holds them)",
    )
    parser.add_argument(
        "--horovod-elastic",
        action="store_true",
        default=None,
        help="horovod: the program uses hvd.elastic; restarts go through Horovod elastic "
        "(horovodrun --host-discovery-script, --min-np/--max-np): a failed rank's host "
        "leaves for a moment and every rank goes on from its last commit. Needs "
        "--max-restarts of at least 1 and the gloo launcher",
    )
    parser.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="DISTCONSOLE_CHECKPOINT_DIR for every process, e.g. on shared storage "
        "(default: checkpoints/ in the job's directory on each host, kept over restarts)",
    )


def cli_error(exc: JobSpecError) -> JobSpecError:
    """The same error, naming the CLI option instead of the spec field."""
    return JobSpecError(CLI_OPTION.get(exc.field, exc.field), exc.detail)


@contextlib.contextmanager
def naming_options() -> Iterator[None]:
    """Spec errors raised inside name the CLI option (``--gpus-per-host``), not the field."""
    try:
        yield
    except JobSpecError as exc:
        raise cli_error(exc) from None


def spec_from_args(args: argparse.Namespace) -> JobSpec:
    """Build the spec; a JobSpecError names the CLI option (``--gpus-per-host: ...``)."""
    command: list[str] = list(getattr(args, "command", []) or [])
    if not args.kind:
        raise JobSpecError("--kind", f"is required (one of {', '.join(KINDS)})")
    if not command:
        raise JobSpecError("PROGRAM", "give the program after --, e.g. -- train.py --lr 0.1")
    fields: dict[str, Any] = {
        "kind": args.kind,
        "program": command[0],
        "args": tuple(command[1:]),
        "tags": tuple(args.tags),
        "chief": bool(args.chief),
        "fail_fast": not args.no_fail_fast,
        "stop_on_hang": bool(args.stop_on_hang),
    }
    if args.select_hosts is not None:
        fields["hosts"] = tuple(args.select_hosts.split(","))
    optional = {
        "gpus_per_host": args.gpus_per_host,
        "name": args.name,
        "total_steps": args.total_steps,
        "ps": args.ps,
        "workers": args.workers,
        "master_port": args.master_port,
        "interface": args.interface,
        "workdir": args.workdir,
        "horovod_launcher": args.horovod_launcher,
        "net": args.net,
        "ib_hca": args.ib_hca,
        "hang_timeout": args.hang_timeout,
        "sync": args.sync,
        "sync_max_size": args.sync_max_size,
        "sync_max_file": args.sync_max_file,
        "ray_object_store": args.ray_object_store,
        "ray_dashboard_host": args.ray_dashboard_host,
        "ray_dashboard_port": args.ray_dashboard_port,
        "notify_command": getattr(args, "notify_command", None),
        "notify_on": getattr(args, "notify_on", None),
        "max_restarts": getattr(args, "max_restarts", None),
        "checkpoint_dir": getattr(args, "checkpoint_dir", None),
        "min_hosts": getattr(args, "min_hosts", None),
        "horovod_elastic": getattr(args, "horovod_elastic", None),
        "rendezvous_host": getattr(args, "rendezvous_host", None),
        "slow_threshold": getattr(args, "slow_threshold", None),
        "exclude_slow": getattr(args, "exclude_slow", None),
    }
    if getattr(args, "notify", None):
        fields["notify"] = tuple(args.notify)
    if getattr(args, "spare_hosts", None):
        fields["spare_hosts"] = tuple(args.spare_hosts.split(","))
    fields.update({k: v for k, v in optional.items() if v is not None})
    with naming_options():
        fields["env"] = job_environment(args.env, getattr(args, "env_file", None) or ())
        return make_spec(**fields)


def split_command(rest: Sequence[str]) -> tuple[list[str], list[str]]:
    """``[options..., "--", program, args...]`` -> (options, command)."""
    items = list(rest)
    if "--" in items:
        cut = items.index("--")
        return items[:cut], items[cut + 1 :]
    return items, []


def job_parser(
    name: str,
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
    summary: str = "",
) -> Any:
    parser = argparse.ArgumentParser(
        prog=f"distconsole {name} HOSTS",
        usage=f"distconsole {name} HOSTS --kind KIND [options] -- PROGRAM [ARGS...]",
        description=(f"{summary}. " if summary else "")
        + f"HOSTS is {options.INVENTORY_HELP}. PROGRAM is a script (.py, run with the "
        "host's python), an executable, or example:ddp / example:horovod / example:mpi / "
        "example:ps / example:ray. "
        "In ARGS, {steps_per_rank}, {total_steps} and {world_size} are replaced.",
    )
    add_job_options(parser)
    if extra is not None:
        extra(parser)
    return parser


def parse_job_args(inner: argparse.ArgumentParser, outer: argparse.Namespace) -> Any:
    """Parse ``outer.rest`` (exits 2 naming a bad option); adds ``inventory`` and ``command``."""
    options, command = split_command(outer.rest)
    args = inner.parse_args(options)
    args.inventory = outer.inventory
    args.command = command
    return args


class _InnerHelp(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, inner: Any, **_: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show this help message and exit")
        self.inner = inner

    def __call__(self, parser: Any, namespace: Any, values: Any, option: str | None = None) -> None:
        self.inner.print_help()
        parser.exit()


def register_job_command(
    sub: Any,
    name: str,
    *,
    help: str,
    run: Callable[[argparse.Namespace], int],
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.ArgumentParser:
    """Add ``distconsole NAME HOSTS [options] -- PROGRAM [ARGS...]``; ``run`` gets the
    parsed job options plus ``inventory`` (the HOSTS path) and ``command``."""
    inner = job_parser(name, extra, summary=help)
    # The outer parser's own -h would list only HOSTS and -h, then the inner's options
    # again: -h prints the inner parser's help, the one list of every option.
    outer: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help,
        usage=inner.format_usage().removeprefix("usage: "),
        add_help=False,
    )
    outer.add_argument("-h", "--help", action=_InnerHelp, inner=inner)
    options.add_inventory(outer)
    outer.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    outer.set_defaults(func=lambda outer_args: run(parse_job_args(inner, outer_args)))
    return outer
