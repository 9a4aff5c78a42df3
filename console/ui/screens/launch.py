"""``l``: the launch form. Keyboard only; errors inline under each field; a live preview
of the exact per-host commands; Enter in a text field or ctrl+r launches, Esc closes.
Enter on the Kind or network select opens its list and chooses in it, on the host list
or a box it ticks, as Textual's widgets do: it never launches there. The form opens on
its first field, Kind, so the Enter a new user presses to open that list opens it.

What is typed survives closing the form: every change is kept in the app's services
(:class:`LaunchDraft`) and the next form opens with it."""

from __future__ import annotations

from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Checkbox, Header, Input, Label, Select, SelectionList, Static

from console.errors import ConsoleError, JobSpecError, PlanError, PreflightError
from console.jobs.models import JobKind, JobPlan
from console.jobs.paths import new_job_id
from console.jobs.plan.netpresets import NET_PRESETS
from console.jobs.plan.planner import plan
from console.jobs.service import LaunchEvent, ValidationProgress, ValidationWarning
from console.jobs.spec import JobSpec
from console.jobs.ssh.runner import FREE_PORT_KINDS as RUNNER_FREE_PORT_KINDS
from console.jobs.sync.push import spec_in_unscanned_tree
from console.ui import slurm_form
from console.ui.jobs_service import plan_preview
from console.ui.screens.launch_fields import (
    KIND_EXAMPLES,
    PREFLIGHT_BOX,
    PS_ONLY,
    RAY_ONLY,
    TEXT_FIELDS,
    VALIDATE_BOX,
    form_to_spec,
    plan_problem,
    preflight_refusal,
    steps_split_hint,
)
from console.ui.services import LaunchDraft, Services
from console.ui.widgets.keys_footer import KeysFooter

NET_HCA = ("ib", "roce")  # the presets that take an HCA list (console/jobs/plan/netpresets.py)
# Kinds whose master port, when the form leaves it empty, is a free port that the
# runner asks the master host for at launch (runner.prepare).
FREE_PORT_KINDS = tuple(kind.value for kind in RUNNER_FREE_PORT_KINDS)


class LaunchScreen(Screen[str | None]):
    """Dismisses with the started job's id (None when closed without launching)."""

    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("ctrl+r", "launch", "Launch"),
    ]

    def __init__(self, services: Services) -> None:
        super().__init__(name="launch")
        self.services = services
        self.inventory = services.inventory
        self.spec: JobSpec | None = None
        self.errors: dict[str, str] = {}
        self.launching = False
        self.draft = services.launch_draft
        # One job id per job name while the form is open: the preview (ids, paths, ports)
        # stays still as the user types, and the launch uses the id it showed.
        self._job_ids: dict[str, str] = {}

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="launch-body"):
            with VerticalScroll(id="launch-form"):
                yield Label("Kind")
                yield Select(
                    [(k.value, k.value) for k in JobKind],
                    value=self.draft.kind if self.draft else JobKind.DDP.value,
                    allow_blank=False,
                    id="kind",
                )
                yield Static("", id="error-kind", classes="field-error", markup=False)
                yield from slurm_form.scheduler_widgets(
                    self.inventory, self.draft.fields if self.draft else {}
                )
                yield Label("Hosts (none ticked: all)")
                ticked = set(self.draft.hosts) if self.draft else set()
                yield SelectionList[str](
                    *[
                        (f"{h.name}  {' '.join(h.tags)}", h.name, h.name in ticked)
                        for h in self.inventory.hosts
                    ],
                    id="hosts",
                )
                yield Static("", id="error-hosts", classes="field-error", markup=False)
                for name, label, placeholder in TEXT_FIELDS:
                    if name == "interface":
                        yield from self._net_preset()
                    yield Label(label, id=f"label-{name}")
                    yield Input(value=self._first_value(name), placeholder=placeholder, id=name)
                    if name == "total_steps":
                        yield Static("", id="hint-total_steps", classes="field-hint", markup=False)
                    yield Static("", id=f"error-{name}", classes="field-error", markup=False)
                fail_fast, preflight = (
                    (self.draft.fail_fast, self.draft.preflight) if self.draft else (True, True)
                )
                yield Checkbox(
                    "Fail fast: one failing rank stops the job", fail_fast, id="fail_fast"
                )
                yield Checkbox(
                    "Stop the job when it hangs (after capturing every rank's stacks)",
                    self.draft.stop_on_hang if self.draft else False,
                    id="stop_on_hang",
                )
                yield Checkbox(
                    "Horovod elastic: the program uses hvd.elastic (gloo, restarts ≥ 1)",
                    self.draft.horovod_elastic if self.draft else False,
                    id="horovod_elastic",
                )
                yield Static("", id="error-horovod_elastic", classes="field-error", markup=False)
                yield Checkbox(PREFLIGHT_BOX, preflight, id="preflight")
                validate = self.draft.validate if self.draft else False
                yield Checkbox(VALIDATE_BOX, validate, id="validate")
            with VerticalScroll(id="launch-preview-box") as box:
                box.border_title = "What every host will run"
                yield Static("", id="launch-preview", markup=False)
        yield Static("", id="launch-status", markup=False)
        yield KeysFooter()

    def _net_preset(self) -> ComposeResult:
        """The network preset (--net); the preview shows the variables it sets."""
        yield Label("Network preset (auto: NCCL picks)", id="label-net")
        chosen = self.draft.fields.get("net", "auto") if self.draft else "auto"
        yield Select([(n, n) for n in NET_PRESETS], value=chosen, allow_blank=False, id="net")
        yield Static("", id="error-net", classes="field-error", markup=False)

    def on_mount(self) -> None:
        self.refresh_preview()
        # The field at the top, where the eye starts: focused on Program (half-way down)
        # the Enter meant to open the Kind list launched the job (issue 23 item 6).
        self.query_one("#kind", Select).focus()

    def check_consume_key(self, key: str, character: str | None) -> bool:
        # Every printable key belongs to the form: Textual hands a letter typed on the
        # kind select, the host list or a checkbox on to the app's bindings, so `q`
        # would quit and `g` leave the form (Input alone keeps its own letters).
        return character is not None and character.isprintable()

    # -- form state ----------------------------------------------------------------------

    def _first_value(self, name: str) -> str:
        if self.draft is not None:
            return self.draft.fields.get(name, "")
        return KIND_EXAMPLES[JobKind.DDP.value] if name == "program" else ""

    def _keep_draft(self, values: dict[str, Any]) -> None:
        self.draft = LaunchDraft(
            kind=values["kind"],
            hosts=tuple(values["hosts"]),
            fields={
                **{name: values[name] for name, _, _ in TEXT_FIELDS},
                "net": values["net"],
                **{name: values[name] for name in slurm_form.FIELDS if name in values},
            },
            fail_fast=values["fail_fast"],
            stop_on_hang=values["stop_on_hang"],
            horovod_elastic=values["horovod_elastic"],
            preflight=self.query_one("#preflight", Checkbox).value,
            validate=self.query_one("#validate", Checkbox).value,
        )
        self.services.launch_draft = self.draft

    def values(self) -> dict[str, Any]:
        values: dict[str, Any] = {
            "kind": str(self.query_one("#kind", Select).value),
            "hosts": list(self.query_one("#hosts", SelectionList).selected),
            "net": str(self.query_one("#net", Select).value),
            "fail_fast": self.query_one("#fail_fast", Checkbox).value,
            "stop_on_hang": self.query_one("#stop_on_hang", Checkbox).value,
            "horovod_elastic": self.query_one("#horovod_elastic", Checkbox).value,
        }
        for name, _, _ in TEXT_FIELDS:
            values[name] = self.query_one(f"#{name}", Input).value
        if self.query("#scheduler"):
            values["scheduler"] = str(self.query_one("#scheduler", Select).value)
            values["nodes"] = self.query_one("#nodes", Input).value
        return values

    def refresh_preview(self) -> None:
        values = self.values()
        self._keep_draft(values)
        only = {name: JobKind.PS.value for name in PS_ONLY}
        only.update({name: JobKind.RAY.value for name in RAY_ONLY})
        for name, kind in only.items():
            shown = values["kind"] == kind
            for selector in (f"#{name}", f"#label-{name}", f"#error-{name}"):
                self.query_one(selector).display = shown
            if not shown:
                values[name] = ""
        horovod = values["kind"] == JobKind.HOROVOD.value
        for selector in ("#horovod_elastic", "#error-horovod_elastic"):
            self.query_one(selector).display = horovod
        if not horovod:
            values["horovod_elastic"] = False
        hca = values["net"] in NET_HCA
        for selector in ("#ib_hca", "#label-ib_hca", "#error-ib_hca"):
            self.query_one(selector).display = hca
        if not hca:
            values["ib_hca"] = ""
        spec, errors = form_to_spec(values)
        preview = ""
        job: JobPlan | None = None
        if spec is not None:
            try:
                free_port = spec.master_port is None and values["kind"] in FREE_PORT_KINDS
                # With --sync the processes run in the synced copy, as the launch plans.
                shown = spec_in_unscanned_tree(spec)
                job = plan(shown, self.inventory, job_id=self.job_id_for(spec))
                preview = plan_preview(job, port_chosen_at_launch=free_port, sync=spec.sync)
            except JobSpecError as exc:
                errors = {exc.field: exc.detail}
                spec = None
            except PlanError as exc:
                errors = plan_problem(exc)  # on the field whose option it names
                spec = None
        slurm = slurm_form.chosen(values)
        for selector in ("#nodes", "#label-nodes", "#error-nodes"):
            for node in self.query(selector):
                node.display = slurm
        if spec is not None and slurm:
            preview, errors = slurm_form.form_preview(
                spec, self.inventory, values, self.job_id_for(spec)
            )
            spec = spec if not errors else None
        self.spec, self.errors = spec, errors
        self.query_one("#hint-total_steps", Static).update(steps_split_hint(job))
        for node in self.query(".field-error"):
            field = (node.id or "").removeprefix("error-")
            if isinstance(node, Static):
                node.update(errors.get(field, ""))
        unplaced = {f: m for f, m in errors.items() if not self.query(f"#error-{f}")}
        status = self.query_one("#launch-status", Static)
        if unplaced:
            status.update("; ".join(f"{f}: {m}" for f, m in unplaced.items()))
        elif errors:
            status.update("Fix the fields marked in red.")
        elif not self.launching:
            status.update("Ready: ctrl+r launches (or Enter in a text field); Esc closes.")
        self.query_one("#launch-preview", Static).update(
            preview or "(the preview appears once the form is valid)"
        )

    def job_id_for(self, spec: JobSpec) -> str:
        name = spec.display_name
        if name not in self._job_ids:
            self._job_ids[name] = new_job_id(name)
        return self._job_ids[name]

    def on_input_changed(self, _event: Input.Changed) -> None:
        self.refresh_preview()

    def on_select_changed(self, event: Select.Changed) -> None:
        program = self.query_one("#program", Input)
        # Picking another kind while the program is still a bundled example: the
        # example of that kind (the DDP example fails under horovodrun).
        if event.select.id == "kind" and program.value.strip() in KIND_EXAMPLES.values():
            program.value = KIND_EXAMPLES.get(str(event.value), program.value)
        self.refresh_preview()

    def on_selection_list_selected_changed(self, _event: SelectionList.SelectedChanged) -> None:
        self.refresh_preview()

    def on_checkbox_changed(self, _event: Checkbox.Changed) -> None:
        self.refresh_preview()

    def on_input_submitted(self, _event: Input.Submitted) -> None:
        self.action_launch()

    # -- actions -------------------------------------------------------------------------

    def action_close(self) -> None:
        self.dismiss(None)

    def action_launch(self) -> None:
        self.refresh_preview()
        status = self.query_one("#launch-status", Static)
        if self.spec is None:
            first = next(iter(self.errors), None)
            if first and self.query(f"#{first}"):
                self.query_one(f"#{first}").focus()
            status.update("Not launched: fix the fields marked in red.")
            return
        if self.launching:
            return
        if self.services.jobs is None:
            status.update("Not launched: not connected to the cluster yet.")
            return
        self.launching = True
        status.update("Launching: planning, pre-flight, starting on every host…")
        # A failed attempt may have left files under its id: the next one gets a new id.
        job_id = self._job_ids.pop(self.spec.display_name, None)
        preflight = self.query_one("#preflight", Checkbox).value
        # The quick validation is a pre-flight step: no pre-flight, no validation.
        validate = preflight and self.query_one("#validate", Checkbox).value
        self._launch(self.spec, preflight, job_id, validate)

    def _validation_event(self, event: LaunchEvent) -> None:
        """``launch --validate``'s progress on the status line, its warns as notes."""
        if isinstance(event, ValidationProgress):
            status = self.query_one("#launch-status", Static)
            status.update(f"Launching: validate {event.line}")
        elif isinstance(event, ValidationWarning):
            self.notify(f"validate: {event.line}", severity="warning", timeout=15)

    @work(exclusive=True, group="launch")
    async def _launch(
        self, spec: JobSpec, preflight: bool, job_id: str | None, validate: bool = False
    ) -> None:
        status = self.query_one("#launch-status", Static)
        jobs = self.services.jobs
        try:
            if jobs is None:
                status.update("Not launched: not connected to the cluster.")
                return
            if slurm_form.chosen(self.values()):
                nodes, _problem = slurm_form.nodes_of(self.values().get("nodes", ""))
                status.update("Submitting on the Slurm login host…")
                submitted = await jobs.submit_slurm(
                    spec, nodes=nodes or 1, preflight=preflight, job_id=job_id
                )
                self.dismiss(submitted)
                return
            job = await jobs.launch(
                spec,
                preflight=preflight,
                validate=validate,
                job_id=job_id,
                on_sync=lambda p: status.update(f"Launching: sync {p.line()}"),
                on_event=self._validation_event,
            )
        except PreflightError as exc:
            status.update(preflight_refusal(str(exc)))
            return
        except ConsoleError as exc:
            status.update(f"Not launched: {exc}")
            return
        finally:
            self.launching = False
        self.dismiss(job.id)
