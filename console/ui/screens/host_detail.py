"""One host in full: host figures, its health events with their times, every GPU with
every reported field, each GPU's recent utilization, memory and temperature as plots,
every process."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static

from console import display
from console.display import NOT_REPORTED, figure
from console.inventory import Host
from console.jobs.slurm.queue import SlurmJobOnNode
from console.probe.health import GpuVerdict, clock, health_events
from console.probe.models import GpuSample, HostView
from console.ui.attention import DEFAULT_THRESHOLDS, Thresholds, gpu_alerts, health_of
from console.ui.formatting import plain
from console.ui.gpu_history import FIGURES
from console.ui.services import Services
from console.ui.widgets.gpu_panel import host_figures
from console.ui.widgets.gpu_plots import GpuHistoryPlot
from console.ui.widgets.keys_footer import KeysFooter
from console.validate.store import Validated, load_validated

GPU_COLUMNS = (
    "GPU", "Name", "Util", "Mem util", "Memory", "Temp", "Power", "Fan", "Perf",
    "SM MHz", "Mem MHz", "ECC corr/uncorr", "MIG", "UUID", "Attention",
)  # fmt: skip
PROCESS_COLUMNS = ("GPU", "PID", "User", "Memory", "Job", "Rank", "Local rank", "Command")


MAX_HEALTH_EVENTS = 8  # the most recent ones; `distconsole health` lists every GPU


def health_lines(view: HostView, now: float) -> list[str]:
    """``Health: 12:03:11 GPU 5 FAIL Xid 79 (GPU has fallen off the bus): ...``, oldest
    first, the last MAX_HEALTH_EVENTS of them."""
    events = health_events(view, now)[-MAX_HEALTH_EVENTS:]
    return [
        f"Health: {clock(e.time)} {'host' if e.gpu is None else f'GPU {e.gpu}'} "
        f"{e.state.upper()} {e.text}"
        for e in events
    ]


def gpu_row(
    g: GpuSample, limits: Thresholds = DEFAULT_THRESHOLDS, health: GpuVerdict | None = None
) -> tuple[str, ...]:
    memory = f"{figure(g.memory_used_mib)}/{figure(g.memory_total_mib)} MiB"
    ecc = f"{figure(g.ecc_corrected)}/{figure(g.ecc_uncorrected)}"
    power = f"{figure(g.power_draw_w)}/{figure(g.power_limit_w)} W"
    return (
        str(g.index), g.name or NOT_REPORTED, figure(g.utilization_gpu, "%"),
        figure(g.utilization_memory, "%"), memory, figure(g.temperature_c, "°C"), power,
        figure(g.fan_percent, "%"), figure(g.pstate), figure(g.clock_sm_mhz),
        figure(g.clock_mem_mhz), ecc, figure(g.mig_mode), g.uuid or NOT_REPORTED,
        ", ".join(gpu_alerts(g, limits, health)),
    )  # fmt: skip


def all_ok_line(gpus: int) -> str:
    every = "the GPU is" if gpus == 1 else f"all {gpus} GPUs are"
    return f"Health: {every} ok (no alert, no health event)"


def validation_lines(validated: Validated | None, now: float) -> list[str]:
    """``Validated 2 h ago: warn (CPU limited by a cgroup quota ...)``: the host's last
    ``distconsole validate`` (or ``launch --validate``); nothing when never validated."""
    if validated is None:
        return []
    text = validated.ago(now)
    reasons = display.plain("; ".join(validated.reasons))
    return [text[0].upper() + text[1:] + (f" ({reasons})" if reasons else "")]


NOT_SAMPLED_OTHERS = "no figures: only the job's owner may sample it through srun"


def slurm_lines(jobs: Sequence[SlurmJobOnNode], *, sampled: bool = True) -> list[str]:
    """``Slurm: slurm 12 alice train (yours): RUNNING, GPUs 0,1``, one line per job;
    on a host with no live sample, another user's job says why it has no figures."""
    lines = []
    for job in jobs:
        gpus = ",".join(map(str, job.gpu_indices)) or str(job.gpus)
        held = f", GPUs {gpus}" if job.gpus else ", no GPU"
        why = "" if sampled or job.mine else f"; {NOT_SAMPLED_OTHERS}"
        label = f"{job.label} (slurm {job.slurm_id})" if job.console_job else job.label
        lines.append(f"Slurm: {label}: {job.state}{held}{why}")
    return lines


class HostDetailScreen(Screen[None]):
    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, host: Host, services: Services) -> None:
        super().__init__(name=f"detail:{host.name}")
        self.host = host
        self.view: HostView | None = services.store.views.get(host.name)
        self.slurm = services.store.slurm  # read at each take: Slurm jobs per host
        self.history = services.store.history
        self._clock = services.clock
        self.thresholds = Thresholds.of(services.settings)
        self.inventory_path = services.inventory.path
        self.validated = load_validated(self.inventory_path).get(host.name)

    def reread_validation(self) -> None:
        """Read the host's last validation again (a validate run just ended) and show it."""
        self.validated = load_validated(self.inventory_path).get(self.host.name)
        self.take(self.view)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="detail-host", markup=False)
        yield Static("GPUs", classes="detail-heading")
        gpus: DataTable[Text] = DataTable(id="detail-gpus", cursor_type="row", zebra_stripes=True)
        gpus.add_columns(*GPU_COLUMNS)
        yield gpus
        yield Static("History (each line a GPU)", classes="detail-heading")
        with Horizontal(id="detail-plots"):
            for name in FIGURES:
                yield GpuHistoryPlot(name, id=f"plot-{name}")
        yield Static("Processes", classes="detail-heading")
        processes: DataTable[Text] = DataTable(id="detail-processes", cursor_type="row")
        processes.add_columns(*PROCESS_COLUMNS)
        yield processes
        yield KeysFooter()

    def on_mount(self) -> None:
        self.take(self.view)

    def take(self, view: HostView | None) -> None:
        """Show a newer view of this host (the app forwards every batch while shown)."""
        self.view = view
        if not self.query("#detail-gpus"):
            return  # not composed yet; on_mount shows it
        header = self.query_one("#detail-host", Static)
        gpus = self.query_one("#detail-gpus", DataTable)
        processes = self.query_one("#detail-processes", DataTable)
        for name in FIGURES:
            plot = self.query_one(f"#plot-{name}", GpuHistoryPlot)
            plot.show(self.history.series(self.host.name, name))
        # Rows are rebuilt per sample; keep the user's place in both tables.
        gpu_row_at, process_row_at = gpus.cursor_row, processes.cursor_row
        gpus.clear()
        processes.clear()
        sampled = view is not None and view.live
        # Slurm's jobs on the host, then its last validation: shown with or without a sample.
        told = slurm_lines(self.slurm.get(self.host.name, ()), sampled=sampled)
        told += validation_lines(self.validated, self._clock())
        if view is None:
            header.update("\n".join([f"{self.host.name}: connecting, no sample yet", *told]))
            return
        state = f"{self.host.name} ({display.address(self.host)}): {view.state.value}"
        if view.reason:
            state += f" — {view.reason}"
        if not view.live:
            state += f"; last seen {display.ago(view.last_seen, self._clock())}"
        sample = view.sample
        if sample is None:
            header.update("\n".join([state, *told]))
            return
        source = sample.gpu_source
        if sample.simulated and "simulated" not in source:
            source += " (simulated)"
        lines = [state, host_figures(sample), f"GPU source: {source}"]
        if sample.gpu_error:
            lines.append(sample.gpu_error)
        lines.extend(told)
        events = health_lines(view, self._clock()) if sample.health is not None else []
        lines.extend(events)
        health = health_of(view)
        flagged = [g for g in sample.gpus if gpu_alerts(g, self.thresholds, health.get(g.index))]
        if sample.gpus and not flagged and not events:
            # Silence read as "not checked": say that every GPU was looked at and is fine.
            lines.append(all_ok_line(len(sample.gpus)))
        header.update("\n".join(lines))
        for g in sample.gpus:
            row = gpu_row(g, self.thresholds, health.get(g.index))
            gpus.add_row(*map(plain, row), key=str(g.index))
            for p in g.processes:
                processes.add_row(
                    *map(
                        plain,
                        (
                            str(g.index),
                            str(p.pid),
                            p.user or NOT_REPORTED,
                            figure(p.used_memory_mib, " MiB"),
                            p.job or "",
                            figure(p.rank) if p.job else "",
                            figure(p.local_rank) if p.job else "",
                            p.command or NOT_REPORTED,
                        ),
                    )
                )
        gpus.move_cursor(row=min(gpu_row_at, max(0, gpus.row_count - 1)))
        processes.move_cursor(row=min(process_row_at, max(0, processes.row_count - 1)))
