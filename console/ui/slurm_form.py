"""The launch form's Scheduler choice: ssh (the default) or slurm with a node count.

Shown only when the inventory has a ``slurm:`` section. With slurm the preview is the
batch script ``plan --scheduler slurm`` prints (``jobs/slurm.format_prepared``, the
script from ``export/sbatch.py``), and launching submits it on the login host through
the jobs service. The form keeps the choice in its draft like every other field.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from textual.widget import Widget
from textual.widgets import Input, Label, Select, Static

from console.errors import ConsoleError
from console.export.sbatch import backend_script
from console.inventory import Inventory
from console.jobs.slurm.backend import format_prepared, prepare_offline
from console.jobs.spec import JobSpec

SCHEDULERS = ("ssh", "slurm")
FIELDS = ("scheduler", "nodes")  # kept in the form's draft


def scheduler_widgets(inventory: Inventory, draft: Mapping[str, str]) -> Iterator[Widget]:
    """The Scheduler select and the Nodes field (nothing without a slurm: section)."""
    if inventory.slurm is None:
        return
    yield Label(f"Scheduler (slurm: submitted on {inventory.slurm.login})", id="label-scheduler")
    chosen = draft.get("scheduler") or "ssh"
    yield Select([(s, s) for s in SCHEDULERS], value=chosen, allow_blank=False, id="scheduler")
    yield Label("Nodes (slurm)", id="label-nodes")
    yield Input(
        value=draft.get("nodes", ""), placeholder="nodes to allocate (default 1)", id="nodes"
    )
    yield Static("", id="error-nodes", classes="field-error", markup=False)


def nodes_of(text: str) -> tuple[int | None, str]:
    """The node count typed (empty: 1), or None and why not."""
    text = text.strip()
    if not text:
        return 1, ""
    if not text.isdigit() or int(text) < 1:
        return None, f"{text!r}: a whole number >= 1"
    return int(text), ""


def slurm_preview(
    spec: JobSpec, inventory: Inventory, nodes: int, job_id: str
) -> tuple[str, dict[str, str]]:
    """The batch script and its output files as ``plan --scheduler slurm`` shows them,
    or the problem under the field it concerns."""
    settings = inventory.slurm
    if settings is None:
        return "", {"scheduler": f"{inventory.path} has no slurm: section"}
    try:
        login = inventory.get(settings.login)
        prepared = prepare_offline(backend_script(inventory), spec, login, nodes, job_id)
    except ConsoleError as exc:
        return "", {"plan": str(exc)}
    return format_prepared(prepared, login.name), {}


def chosen(values: Mapping[str, object]) -> bool:
    """Whether the form's values ask for a Slurm job."""
    return values.get("scheduler") == "slurm"


def form_preview(
    spec: JobSpec, inventory: Inventory, values: Mapping[str, str], job_id: str
) -> tuple[str, dict[str, str]]:
    """:func:`slurm_preview` for the form's values (a bad node count names ``nodes``)."""
    nodes, problem = nodes_of(values.get("nodes", ""))
    if nodes is None:
        return "", {"nodes": problem}
    return slurm_preview(spec, inventory, nodes, job_id)
