"""``distconsole export HOSTS --to kubeflow|sbatch [options] -- PROGRAM [ARGS...]``.

The same job options as ``plan`` and ``launch`` (one spec, built by
``spec_from_args``), written for another scheduler instead of started over SSH:

- ``--to kubeflow [--api trainer-v2|v1] [--image IMAGE] [--namespace NS]
  [--runtime NAME]``: a TrainJob (Trainer v2), or a PyTorchJob / MPIJob / TFJob (v1);
- ``--to sbatch [--partition P] [--account A] [--time T]``: a Slurm batch script.

Prints the manifest or script, or writes it into ``--out DIR`` (and prints its path).
Warnings go to stderr. Nothing touches a host or a cluster. Exit status 2 for bad input
(naming the option), 0 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from console import inventory as inventory_module
from console.commands.parts.job_options import naming_options, register_job_command, spec_from_args
from console.errors import ConsoleError, UsageError
from console.export import job_shape, kubeflow, kubeflow_export, sbatch, sbatch_export, to_yaml
from console.export.kubeflow import APIS
from console.jobs.private import write_private

TARGETS = ("kubeflow", "sbatch")


def register(sub: Any) -> None:
    register_job_command(
        sub,
        "export",
        help="write the job as Kubeflow manifests or a Slurm batch script",
        run=run,
        extra=_add_export_options,
    )


def _add_export_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("export")
    group.add_argument("--to", metavar="kubeflow|sbatch", help="what to write (required)")
    group.add_argument("--out", metavar="DIR", help="write the file into DIR instead of stdout")
    group.add_argument(
        "--api",
        metavar="|".join(APIS),
        default="trainer-v2",
        help="kubeflow: a Trainer v2 TrainJob (default) or the v1 PyTorchJob/MPIJob/TFJob",
    )
    group.add_argument("--image", help="kubeflow: the container image (v1 and examples need it)")
    group.add_argument("--namespace", metavar="NS", help="kubeflow: metadata.namespace")
    group.add_argument(
        "--runtime",
        metavar="NAME",
        help="kubeflow trainer-v2: the ClusterTrainingRuntime "
        "(default torch-distributed, mpi-distributed for mpi/horovod)",
    )
    group.add_argument("--partition", help="sbatch: #SBATCH --partition")
    group.add_argument("--account", help="sbatch: #SBATCH --account")
    group.add_argument("--time", metavar="LIMIT", help="sbatch: #SBATCH --time (e.g. 02:00:00)")


def _refuse_other_target(args: argparse.Namespace, target: str, options: tuple[str, ...]) -> None:
    for option in options:
        value = getattr(args, option)
        if value is not None:
            raise UsageError(f"--{option}", f"does not apply to --to {target}")


def render(args: argparse.Namespace) -> tuple[str, str, tuple[str, ...]]:
    """``(file name, text, warnings)`` for the parsed command line."""
    if args.to not in TARGETS:
        shown = f"{args.to!r}: " if args.to else ""
        raise UsageError("--to", f"{shown}choose one of {', '.join(TARGETS)}")
    # The export's own options first: a typo there is named whatever the job is.
    if args.to == "kubeflow":
        _refuse_other_target(args, "kubeflow", ("partition", "account", "time"))
        kubeflow.check_options(
            api=args.api, image=args.image, namespace=args.namespace, runtime=args.runtime
        )
    else:
        _refuse_other_target(args, "sbatch", ("image", "namespace", "runtime"))
        sbatch.check_options(partition=args.partition, account=args.account, time=args.time)
    spec = spec_from_args(args)
    inv = inventory_module.load(args.inventory)
    with naming_options():
        shape = job_shape(spec, inv)
    if args.to == "kubeflow":
        manifest = kubeflow_export(
            shape,
            api=args.api,
            image=args.image,
            namespace=args.namespace,
            runtime=args.runtime,
        )
        return manifest.file_name, to_yaml([manifest.manifest]), manifest.warnings
    script = sbatch_export(shape, partition=args.partition, account=args.account, time=args.time)
    return script.file_name, script.script, script.warnings


def hang_warnings(args: argparse.Namespace) -> tuple[str, ...]:
    """``--hang-timeout``/``--stop-on-hang`` given explicitly: said not to travel (the hang
    check is the hosts' supervisors', which only ``launch`` starts)."""
    given = []
    if args.hang_timeout is not None:
        given.append(f"--hang-timeout {args.hang_timeout}")
    if args.stop_on_hang:
        given.append("--stop-on-hang")
    if not given:
        return ()
    return (
        f"{' and '.join(given)} {'is' if len(given) == 1 else 'are'} not exported: the hang "
        "check runs in distconsole's host supervisors, which only `distconsole launch` starts",
    )


def run(args: argparse.Namespace) -> int:
    file_name, text, warnings = render(args)
    if args.sync:
        where = "in the image" if args.to == "kubeflow" else "on the nodes' shared filesystem"
        warnings = (
            f"--sync {args.sync} is not exported: PROGRAM and --workdir are used as given, "
            f"so put the directory {where}",
            *warnings,
        )
    warnings = (*hang_warnings(args), *warnings)
    for warning in warnings:
        print(f"distconsole export: warning: {warning}", file=sys.stderr)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    directory = Path(args.out)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / file_name
        # It holds the job's environment (--env tokens too): its owner's alone.
        write_private(path, text)
        if file_name.endswith(".sbatch"):
            os.chmod(path, 0o700)
    except OSError as exc:
        raise ConsoleError(f"--out: cannot write {args.out}: {exc.strerror or exc}") from None
    print(path)
    return 0
