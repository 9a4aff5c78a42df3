"""The launch form's fields (spec field, label, placeholder) and how their values become
a ``JobSpec`` or problems, each on the field it concerns: pure, no widgets
(``screens/launch.py`` lays them out)."""

from __future__ import annotations

import shlex
from typing import Any

from console.errors import JobSpecError, PlanError
from console.jobs.models import JobKind, JobPlan
from console.jobs.spec import CLI_OPTION, JobSpec, make_spec
from console.jobs.spec_env import ENV_FILE_OPTION, job_environment

TEXT_FIELDS: tuple[tuple[str, str, str], ...] = (
    # (spec field, label, placeholder)
    ("tags", "Tags", "only hosts with any of these tags (space separated)"),
    ("gpus_per_host", "GPUs per host", "default: the host's gpus, else 1"),
    ("program", "Program", "script, executable or example:ddp / example:horovod / example:ps"),
    ("args", "Arguments", "as in a shell: --lr 0.1 --steps {steps_per_rank}"),
    ("env", "Environment", "NAME=VALUE NAME2='a b'"),
    ("total_steps", "Total steps (split per rank)", "each rank runs total ÷ ranks"),
    ("ps", "PS tasks", "ps kind: number of parameter servers (default 1)"),
    ("workers", "Workers", "ps kind: number of workers (default one per host)"),
    ("ray_object_store", "Ray object store", "ray kind: per node, e.g. 2G (default: Ray's)"),
    ("ray_dashboard_host", "Ray dashboard host", "ray kind: listen address (default 127.0.0.1)"),
    ("ray_dashboard_port", "Ray dashboard port", "ray kind: default the master port + 1"),
    ("interface", "Interface", "NIC for NCCL/Gloo/MPI traffic (default: the host's)"),
    ("ib_hca", "IB HCAs", "ib/roce: NCCL_IB_HCA, e.g. mlx5_0,mlx5_1 (default: NCCL picks)"),
    ("master_port", "Master port", "default: a free port on the master host"),
    ("name", "Name", "default: kind-program"),
    ("workdir", "Working directory", "default: each host's work_dir"),
    (
        "hang_timeout",
        "Hang timeout (seconds)",
        "default 300: no new log line for so long = hung; 0/off",
    ),
    ("sync", "Sync directory", "local dir put on every host first; program and workdir inside it"),
    (
        "max_restarts",
        "Max restarts",
        "restart a failed job up to N times its engine's way (default: inventory's, else 0)",
    ),
    (
        "min_hosts",
        "Min hosts",
        "ddp or horovod elastic: go on while M hosts remain (needs restarts ≥ 1)",
    ),
    (
        "spare_hosts",
        "Spare hosts",
        "ddp with min hosts: comma-separated hosts that replace a lost one (not the job's)",
    ),
    (
        "rendezvous_host",
        "Rendezvous host",
        "ddp/horovod elastic: a host that trains nothing holds rendezvous + leader",
    ),
    (
        "checkpoint_dir",
        "Checkpoint directory",
        "DISTCONSOLE_CHECKPOINT_DIR on the hosts (default: checkpoints/ in the job's dir)",
    ),
    # As --notify URL (repeatable), --notify-command CMD and --notify-on EVENTS: the
    # spec's own checks judge them, as they judge the command line's.
    ("notify", "Notify webhooks", "URLs POSTed each event, space separated (as --notify)"),
    ("notify_command", "Notify command", "run on the leader host for each event"),
    ("notify_on", "Notify on", "events, comma separated (default failed,hung,succeeded)"),
    (
        "slow_threshold",
        "Slow threshold",
        "a rank this many x the median for 2 windows is slow (default: inventory's, else 1.3)",
    ),
)
LABELS = {name: label for name, label, _ in TEXT_FIELDS}
INT_FIELDS = (
    "gpus_per_host",
    "total_steps",
    "ps",
    "workers",
    "master_port",
    "ray_dashboard_port",
    "max_restarts",
    "min_hosts",
)
FIELD_NAMES = tuple(name for name, _, _ in TEXT_FIELDS)
# Switches with an error line of their own under them (the others never fail).
SWITCH_ERRORS = ("horovod_elastic",)
PS_ONLY = ("ps", "workers")
RAY_ONLY = ("ray_object_store", "ray_dashboard_host", "ray_dashboard_port")
# The bundled example each kind starts with; mpi's needs no MPI library nor horovod.
KIND_EXAMPLES = {
    JobKind.DDP.value: "example:ddp",
    JobKind.MPI.value: "example:mpi",
    JobKind.HOROVOD.value: "example:horovod",
    JobKind.PS.value: "example:ps",
    JobKind.RAY.value: "example:ray",
}


def form_to_spec(values: dict[str, Any]) -> tuple[JobSpec | None, dict[str, str]]:
    """Form values -> (spec, {}) or (None, {field: message}); every problem names its field."""
    errors: dict[str, str] = {}
    fields: dict[str, Any] = {"kind": values["kind"], "hosts": tuple(values["hosts"])}
    fields["fail_fast"] = bool(values.get("fail_fast", True))
    fields["net"] = values.get("net") or "auto"  # as --net: JobSpec and the planner judge it
    fields["stop_on_hang"] = bool(values.get("stop_on_hang", False))
    if values.get("horovod_elastic"):
        fields["horovod_elastic"] = True
    for name, _, _ in TEXT_FIELDS:
        raw = str(values.get(name, "")).strip()
        if not raw:
            continue
        try:
            if name in INT_FIELDS:
                if not raw.lstrip("-").isdigit():
                    raise JobSpecError(name, f"{raw!r} is not a whole number")
                fields[name] = int(raw)
            elif name == "tags":
                fields[name] = tuple(raw.replace(",", " ").split())
            elif name == "spare_hosts":  # as --spare-hosts A,B: the spec judges each name
                fields[name] = tuple(raw.split(","))
            elif name == "notify":
                fields[name] = tuple(raw.replace(",", " ").split())
            elif name == "notify_on":
                fields[name] = tuple(e.strip() for e in raw.split(",") if e.strip())
            elif name == "args":
                fields[name] = tuple(shlex.split(raw))
            elif name == "env":
                fields[name] = form_env(shlex.split(raw))
            else:
                fields[name] = raw
        except JobSpecError as exc:
            errors[exc.field] = exc.detail
        except ValueError:  # shlex: an unbalanced quote
            errors[name] = unclosed_quote(name)
    if "program" not in fields and "program" not in errors:
        errors["program"] = "a program is required (a script, an executable or example:NAME)"
    spec = spec_errors(fields, errors)
    return (spec, {}) if spec is not None and not errors else (None, errors)


def unclosed_quote(name: str) -> str:
    return (
        f"{LABELS.get(name, name)}: a quote is not closed; close it, or write a quote "
        "that is part of a value as \\' or \\\""
    )


MAX_SPEC_ERRORS = 12  # each try judges the fields left; the form has fewer that can fail


def spec_errors(fields: dict[str, Any], errors: dict[str, str]) -> JobSpec | None:
    """The spec, adding to ``errors`` every field the spec's checks refuse, not only the
    first: a refused field is taken out and the rest judged again. A field already
    wrong (or a missing program) is judged with a stand-in, its own error kept."""
    trial = dict(fields)
    if "program" in errors:
        trial["program"] = "example:ddp"  # so the other fields are judged
    for _ in range(MAX_SPEC_ERRORS):
        try:
            spec = make_spec(**trial)
        except JobSpecError as exc:
            errors.setdefault(exc.field, exc.detail)
            if exc.field not in trial or exc.field in ("kind", "program"):
                return None
            del trial[exc.field]
            continue
        return spec if trial == fields else None
    return None


def form_env(words: list[str]) -> dict[str, str]:
    """The Environment field's words, as on the command line: NAME=VALUE, NAME (the
    console's own value), ``--env-file=FILE`` or ``--env-file FILE``."""
    items: list[str] = []
    files: list[str] = []
    rest = iter(words)
    for word in rest:
        if word == ENV_FILE_OPTION:
            files.append(next(rest, ""))
        elif word.startswith(ENV_FILE_OPTION + "="):
            files.append(word.removeprefix(ENV_FILE_OPTION + "="))
        else:
            items.append(word)
    try:
        return job_environment(items, files)
    except JobSpecError as exc:
        raise JobSpecError("env", str(exc) if exc.field != "env" else exc.detail) from None


def step_takers(job: JobPlan) -> tuple[int, str]:
    """Who runs the steps and how many of them: a PS job's workers (its parameter
    servers run none), else every rank (a GPU each)."""
    if job.kind is JobKind.PS:
        return sum(1 for launch in job.launches if launch.role == "worker"), "worker"
    return job.world_size, "GPU"


def steps_split_hint(job: JobPlan | None) -> str:
    """What ``--total-steps`` means for this plan, in figures: the per-rank share."""
    if job is None or job.total_steps is None or job.steps_per_rank is None:
        return "Split over the ranks: each rank runs total ÷ number of ranks."
    takers, who = step_takers(job)
    who = "rank" if who == "GPU" else who
    text = (
        f"{job.total_steps} over {takers} {who}s: "
        f"{job.steps_per_rank} steps per {who} ({{steps_per_rank}} in the arguments)"
    )
    if job.steps_dropped:
        text += f"; {job.steps_dropped} dropped by the division"
    return text


PREFLIGHT_BOX = "Run the pre-flight checks before starting"
VALIDATE_BOX = "Validate the hosts in pre-flight (validate --quick: a fail stops the launch)"


def preflight_refusal(message: str) -> str:
    """A failed pre-flight in the form's words: the checks' findings, and the form's way
    past them (its box), not the command line's option."""
    lines = [ln for ln in message.splitlines() if "--skip-preflight" not in ln]
    if any("without --validate" in ln for ln in lines):
        lines = [ln for ln in lines if "without --validate" not in ln]
        lines.append(f'fix the above, or untick "{VALIDATE_BOX}" to launch without it')
        return "Not launched: " + "\n".join(lines)
    lines.append(f'fix the above, or untick "{PREFLIGHT_BOX}" to launch anyway')
    return "Not launched: " + "\n".join(lines)


def plan_problem(exc: PlanError) -> dict[str, str]:
    """A planning error on the field whose option it names (``--spare-hosts needs
    --min-hosts M``: the Spare hosts field), else on ``plan`` (the status line)."""
    text = str(exc)
    for field, option in CLI_OPTION.items():
        if field in (*FIELD_NAMES, *SWITCH_ERRORS) and text.startswith(option + " "):
            return {field: text}
    return {"plan": text}
