"""A standalone Slurm batch script for a job spec: a pure function, no cluster needed.

``sbatch FILE`` runs the same job on N nodes with G GPUs each (the shape of the spec on
the inventory, see :mod:`console.export.shape`):

- ddp: one ``torchrun`` per node (``srun --ntasks-per-node=1``) with the c10d
  rendezvous on the allocation's first node (``--rdzv-endpoint $head:PORT``, the
  spec's ``--master-port``, else 20000 + SLURM_JOB_ID % 20000 so that jobs sharing a
  node do not collide), ``--nnodes $SLURM_NNODES``; ``--tee 3`` with
  TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE prefixes each worker line ``[rankN]: `` with
  its global rank (the console attributes the lines by it);
- mpi, horovod: ``srun --mpi=pmix`` starts G ranks per node (Slurm is the MPI launcher;
  Open MPI must be built with PMIx, as Slurm sites' are). Horovod ranks start the same
  way, as under ``mpirun``: horovod must be built with MPI;
- ps: the ps tasks in one job step and the chief and workers in another, both placed
  round-robin over the nodes (``--distribution=cyclic``); each task takes its role and
  index from ``SLURM_PROCID`` and gets TF_CONFIG built from the node list
  (``scontrol show hostnames $SLURM_JOB_NODELIST``), task k listening on PORT+k in the
  console's order (ps, chief, workers; PORT as for ddp, the derived one a multiple of
  the task count). When the workers' step ends, the ps step is
  stopped (the console's PS rule) and the job ends with the workers' status.

With ``--max-restarts N`` torchrun restarts its workers (``--max-restarts N``, a fresh
store per round as ``launch`` does) and the batch job is ``--requeue``: Slurm runs it
again after a node failure or a preemption, ``DISTCONSOLE_RESTART_COUNT`` from
``SLURM_RESTART_COUNT``; ``DISTCONSOLE_CHECKPOINT_DIR`` is ``--checkpoint-dir``, else
``checkpoints/JOB_ID`` in the submit directory (kept by a requeue: same job id).

Fail-fast is ``srun --kill-on-bad-exit=1``. The environment is the planners'
(PYTHONUNBUFFERED, thread caps, NCCL/Gloo NIC from ``--interface`` or the hosts' common
``interface``, for MPI also OMPI_MCA_btl_tcp_if_include, the user's ``--env``, the step
budget). Every value from the spec
reaches the script through :func:`shlex.quote`; the only unquoted words are the
script's own variables. ``example:NAME`` runs ``python3 -m console.examples.NAME_train``:
distconsole must be installed for the nodes' Python (the script says so at its top).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from console.errors import UsageError
from console.export.shape import JobShape, job_shape
from console.inventory import Inventory
from console.jobs.models import JobKind
from console.jobs.paths import shell_word
from console.jobs.plan.ddp import torchrun_command
from console.jobs.spec import JobSpec, spec_with

# #SBATCH values are read by sbatch, not a shell: only plain words are written there.
_SBATCH_VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:,+=-]*\Z")
SBATCH_OPTIONS = ("partition", "account", "time")
PORT_SPAN = 20000  # derived ports lie in 20000..39999


@dataclass(frozen=True, slots=True)
class SbatchExport:
    name: str
    script: str
    warnings: tuple[str, ...]

    @property
    def file_name(self) -> str:
        return f"{self.name}.sbatch"


def sbatch_value_problem(value: str) -> str | None:
    if _SBATCH_VALUE.match(value):
        return None
    return f"{value!r}: use letters, digits and . _ : , + = - (no spaces)"


def _q(words: list[str] | tuple[str, ...]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def _program(shape: JobShape) -> list[str]:
    module = shape.example_module
    if module is not None:
        return [shape.python, "-m", module]
    if shape.spec.program.endswith(".py"):
        return [shape.python, shape.spec.program]
    return [shape.spec.program]


def _torchrun_target(shape: JobShape) -> list[str]:
    module = shape.example_module
    if module is not None:
        return ["-m", module]
    if shape.spec.program.endswith(".py"):
        return [shape.spec.program]
    return ["--no-python", shape.spec.program]


def _kill_on_bad_exit(shape: JobShape) -> str:
    return f"--kill-on-bad-exit={1 if shape.spec.fail_fast else 0}"


def _task_output(stem: str | None) -> str:
    """srun's ``--output`` for one file per task next to the batch script (``%t`` is the
    task's number in its step), or nothing: the tasks' output goes to the batch log."""
    if stem is None:
        return ""
    return f' --output="$SLURM_SUBMIT_DIR/{stem}-%t.out"'


# torchrun's prefix for its workers' lines (with --tee): the GLOBAL rank, which the
# console's log attribution reads (logs/prefixes.py: "[rank3]: "); c10d numbers the
# nodes in the order they join, so a task's node rank is not known before it runs.
RANK_PREFIX_TEMPLATE = "[rank${rank}]: "


def _port_lines(shape: JobShape, width: int) -> list[str]:
    """``port=...``: the spec's ``--master-port``, else one derived from the Slurm job id
    (20000 + a multiple of ``width`` below 20000), so two jobs sharing a node do not
    collide the way a fixed 29500 would; ``width`` ports from there are the job's."""
    if shape.spec.master_port is not None:
        return [f"port={shape.spec.master_port}"]
    return [
        f"# No --master-port: {width} port(s) from 20000 + a function of the job id.",
        f"port=$((20000 + SLURM_JOB_ID % {PORT_SPAN // width} * {width}))",
    ]


def _ddp(shape: JobShape, stem: str | None) -> list[str]:
    torchrun = _q(torchrun_command(shape.python))
    return [
        'head="${addresses[0]}"',
        *_port_lines(shape, 1),
        'export MASTER_ADDR="$head" MASTER_PORT="$port"',
        f"export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE={shlex.quote(RANK_PREFIX_TEMPLATE)}",
        f"srun {_kill_on_bad_exit(shape)}{_task_output(stem)} --ntasks-per-node=1 \\",
        f'  {torchrun} --nnodes "$SLURM_NNODES" --nproc-per-node {shape.gpus_per_node} \\',
        '  --rdzv-id "$SLURM_JOB_ID" --rdzv-backend c10d --rdzv-endpoint "$head:$port" \\',
        *([f"  --max-restarts {shape.spec.max_restarts} \\"] if shape.spec.max_restarts else []),
        f"  --tee 3 {_q([*_torchrun_target(shape), *shape.args])}",
    ]


def _recovery(spec: JobSpec) -> list[str]:
    """Restarts and checkpoints (only when asked: the scripts stay as they were)."""
    if not (spec.max_restarts or spec.checkpoint_dir):
        return []
    where = (
        shell_word(spec.checkpoint_dir)
        if spec.checkpoint_dir
        else '"$SLURM_SUBMIT_DIR/checkpoints/$SLURM_JOB_ID"'
    )
    lines = [
        f"export DISTCONSOLE_CHECKPOINT_DIR={where}",
        'mkdir -p "$DISTCONSOLE_CHECKPOINT_DIR"',
        'export DISTCONSOLE_RESTART_COUNT="${SLURM_RESTART_COUNT:-0}"',
    ]
    if spec.max_restarts and spec.kind is JobKind.DDP:
        # Each round's workers meet in a fresh store (see jobs/plan/ddp.py).
        lines.append("export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1")
    return lines


def _mpi(shape: JobShape, stem: str | None) -> list[str]:
    kill = _kill_on_bad_exit(shape)
    return [
        f"srun --mpi=pmix {kill}{_task_output(stem)} --ntasks-per-node={shape.gpus_per_node} \\",
        f"  {_q([*_program(shape), *shape.args])}",
    ]


# One PS task: its role from the step ($1) and SLURM_PROCID, TF_CONFIG from the cluster
# the batch script built; then the program ("$@" after the role).
_PS_TASK = """\
k=$SLURM_PROCID
if [ "$1" = ps ]; then type=ps; index=$k
elif [ "$DC_CHIEF" = 1 ] && [ "$k" = 0 ]; then type=chief; index=0
else type=worker; index=$((k - DC_CHIEF)); fi
shift
export DISTCONSOLE_TASK_TYPE=$type DISTCONSOLE_TASK_INDEX=$index
this="{\\"type\\":\\"$type\\",\\"index\\":$index}"
export TF_CONFIG="{\\"cluster\\":$DC_CLUSTER,\\"task\\":$this}"
exec "$@"
"""


def _ps(shape: JobShape, stem: str | None) -> list[str]:
    chief = 1 if shape.spec.chief else 0
    kill = _kill_on_bad_exit(shape)
    program = _q([*_program(shape), *shape.args])
    return [
        *_port_lines(shape, shape.ps_tasks + chief + shape.workers),
        "# Task k of the console's order (ps, chief, workers) listens on its node at port+k;",
        "# each step places its tasks round-robin over the nodes, as TF_CONFIG says.",
        f"ps_tasks={shape.ps_tasks} chief={chief} workers={shape.workers}",
        'address() { echo "\\"${addresses[$(($1 % ${#addresses[@]}))]}:$2\\""; }',
        'join() { local IFS=,; echo "$*"; }',
        "ps=() chief_list=() worker=()",
        'for ((i = 0; i < ps_tasks; i++)); do ps+=("$(address "$i" "$((port + i))")"); done',
        "for ((i = 0; i < chief + workers; i++)); do",
        '  a=$(address "$i" "$((port + ps_tasks + i))")',
        '  if ((i < chief)); then chief_list+=("$a"); else worker+=("$a"); fi',
        "done",
        'DC_CLUSTER="{\\"ps\\":[$(join "${ps[@]}")],\\"worker\\":[$(join "${worker[@]}")]"',
        'if ((chief)); then DC_CLUSTER+=",\\"chief\\":[$(join "${chief_list[@]}")]"; fi',
        'DC_CLUSTER+="}"',
        "export DC_CLUSTER DC_CHIEF=$chief",
        f"task={shlex.quote(_PS_TASK)}",
        "step_nodes() { echo $(($1 < ${#nodes[@]} ? $1 : ${#nodes[@]})); }",
        f'srun --overlap {kill}{_task_output(stem and "ps")} --ntasks="$ps_tasks" --relative=0 \\',
        '  --nodes="$(step_nodes "$ps_tasks")" \\',
        f'  --distribution=cyclic bash -c "$task" task ps {program} &',
        "ps_step=$!",
        "status=0",
        f"srun --overlap {kill}{_task_output(stem and 'worker')} \\",
        '  --ntasks="$((chief + workers))" \\',
        "  --relative=0 \\",
        '  --nodes="$(step_nodes "$((chief + workers))")" \\',
        f'  --distribution=cyclic bash -c "$task" task worker {program} || status=$?',
        "# The PS rule: ps tasks serve until told to stop; the job is done with the workers.",
        'kill -TERM "$ps_step" 2>/dev/null || true',
        'wait "$ps_step" 2>/dev/null || true',
        'exit "$status"',
    ]


def check_options(**values: str | None) -> None:
    """``partition``/``account``/``time`` are plain words (UsageError names the option)."""
    for option, value in values.items():
        problem = sbatch_value_problem(value) if value is not None else None
        if problem:
            raise UsageError(f"--{option}", problem)


def sbatch_export(
    shape: JobShape,
    *,
    partition: str | None = None,
    account: str | None = None,
    time: str | None = None,
    sbatch_options: tuple[str, ...] = (),
    task_output: str | None = None,
) -> SbatchExport:
    """The batch script; UsageError names a bad ``--partition/--account/--time``.

    ``sbatch_options``: more ``#SBATCH`` lines (the inventory's ``slurm.sbatch_options``,
    already checked there). ``task_output`` (the Slurm backend's): each task writes its
    own ``STEM-%t.out`` in the submit directory (ps jobs: ``ps-%t``/``worker-%t``), the
    batch script's own output is ``batch.out`` there."""
    extra = {"partition": partition, "account": account, "time": time}
    check_options(**extra)
    spec = shape.spec
    name = spec.display_name  # job-name rules: letters, digits, '.', '_', '-'
    kind = shape.kind
    nodes = shape.nodes
    lines = [
        "#!/bin/bash",
        f"# {kind.value} job {name}: {nodes} node(s) x {shape.gpus_per_node} GPU(s), "
        + (
            "submitted by `distconsole launch --scheduler slurm`"
            if task_output
            else "written by `distconsole export --to sbatch`. Submit: sbatch THIS_FILE"
        ),
    ]
    if shape.example_module is not None:
        lines.append(
            f"# {spec.program} runs `{shape.python} -m {shape.example_module}`: distconsole "
            "must be installed for the nodes' Python."
        )
    lines.append(f"#SBATCH --job-name={name}")
    if kind is JobKind.PS:
        # Two steps (ps; chief and workers), each round-robin over the nodes: every
        # node holds as many tasks as the larger step puts on its first node.
        largest = max(shape.ps_tasks, shape.workers + (1 if spec.chief else 0))
        nodes = min(nodes, largest)
        per_node = -(-largest // nodes)
        lines += [f"#SBATCH --nodes={nodes}", f"#SBATCH --ntasks-per-node={per_node}"]
    elif kind is JobKind.DDP:
        lines += [f"#SBATCH --nodes={nodes}", "#SBATCH --ntasks-per-node=1"]
    else:
        lines += [f"#SBATCH --nodes={nodes}", f"#SBATCH --ntasks-per-node={shape.gpus_per_node}"]
    lines.append(f"#SBATCH --gpus-per-node={shape.gpus_per_node}")
    lines.append("#SBATCH --output=batch.out" if task_output else "#SBATCH --output=%x-%j.out")
    lines += [f"#SBATCH --{k}={v}" for k, v in extra.items() if v is not None]
    lines += [f"#SBATCH {option}" for option in sbatch_options]
    if spec.max_restarts:
        lines.append("#SBATCH --requeue")
    lines += ["", "set -euo pipefail"]
    if spec.workdir:
        lines.append(f"cd {shell_word(spec.workdir)}")
    env = shape.env(shape.interface)
    if kind in (JobKind.MPI, JobKind.HOROVOD) and shape.interface:
        # Open MPI's TCP traffic on the same NIC (mpirun's --mca btl_tcp_if_include).
        env = {"OMPI_MCA_btl_tcp_if_include": shape.interface, **env}
    for key, value in env.items():
        lines.append(f"export {key}={shlex.quote(value)}")
    lines += _recovery(spec)
    if kind in (JobKind.DDP, JobKind.PS):
        lines.append('mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")')
        # Each node's NodeAddr: how Slurm itself reaches it (a node name may not resolve).
        lines += [
            "addresses=()",
            'for n in "${nodes[@]}"; do',
            '  a=$(scontrol show node "$n" -o |',
            "    sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p') || a=",
            '  addresses+=("${a:-$n}")',
            "done",
        ]
    body = {JobKind.DDP: _ddp, JobKind.MPI: _mpi, JobKind.HOROVOD: _mpi, JobKind.PS: _ps}
    lines += body[kind](shape, task_output)
    warnings = list(shape.warnings)
    if spec.workdir and spec.workdir.startswith("~"):
        warnings.append(f"--workdir {spec.workdir} is the submitting user's home on the nodes")
    return SbatchExport(name=name, script="\n".join(lines) + "\n", warnings=tuple(warnings))


def backend_script(inventory: Inventory) -> Callable[..., tuple[str, tuple[str, ...]]]:
    """The Slurm backend's script writer (``jobs/slurm/backend.py`` ``ScriptWriter``): this
    module's script for ``spec`` on ``nodes`` nodes with the inventory's ``slurm:``
    defaults; the login host lends its Python and interface."""
    settings = inventory.slurm
    if settings is None:
        raise UsageError("--scheduler", f"{inventory.path} has no slurm: section")

    def write(spec: JobSpec, nodes: int, *, task_output: str) -> tuple[str, tuple[str, ...]]:
        on_login = spec_with(spec, hosts=(settings.login,), tags=())
        script = sbatch_export(
            job_shape(on_login, inventory, nodes=nodes),
            partition=settings.partition,
            account=settings.account,
            time=settings.time,
            sbatch_options=settings.sbatch_options,
            task_output=task_output,
        )
        return script.script, script.warnings

    return write
