"""The GPU sample schema: the ONE list of what a sampler line holds, field by field.

The sampler (on the host) builds its records with :func:`record` from these tables, the
console decodes them with the same tables (``console/probe/sampler.py``), the nvidia-smi
parser asks for and maps the ``query`` names, and ``console.probe.models`` dataclasses
are checked against them by a contract test. A new figure is added here first (and
``sampler_program.VERSION`` goes up: the records changed).

Shipped to hosts as part of the sampler: standard library only, Python 3.7+.
"""

from __future__ import annotations

import threading

MIB = 1024.0 * 1024.0  # bytes per MiB: memory figures travel in MiB (the *_mib fields)

# (attribute, type, nvidia-smi --query-gpu name). type: "int", "float" or "str".
GPU_FIELDS = (
    ("index", "int", "index"),
    ("uuid", "str", "uuid"),
    ("name", "str", "name"),
    ("utilization_gpu", "float", "utilization.gpu"),
    ("utilization_memory", "float", "utilization.memory"),
    ("memory_used_mib", "float", "memory.used"),
    ("memory_total_mib", "float", "memory.total"),
    ("temperature_c", "float", "temperature.gpu"),
    ("power_draw_w", "float", "power.draw"),
    ("power_limit_w", "float", "power.limit"),
    ("fan_percent", "float", "fan.speed"),
    ("pstate", "str", "pstate"),
    ("clock_sm_mhz", "float", "clocks.current.sm"),
    ("clock_mem_mhz", "float", "clocks.current.memory"),
    ("ecc_corrected", "int", "ecc.errors.corrected.volatile.total"),
    ("ecc_uncorrected", "int", "ecc.errors.uncorrected.volatile.total"),
    ("mig_mode", "str", "mig.mode.current"),
)
GPU_PROCESSES = "processes"  # a GPU record's list of PROCESS_FIELDS records

# One process on a GPU, as the GPU reader saw it.
PROCESS_FIELDS = (
    ("pid", "int"),
    ("used_memory_mib", "float"),
    ("type", "str"),
    ("job", "str"),
    ("rank", "int"),
    ("local_rank", "int"),
)

# What the sampler adds about a GPU process from /proc (line["procs"][str(pid)]).
PROCESS_OWNER_FIELDS = (
    ("user", "str"),
    ("command", "str"),
    ("job", "str"),
    ("rank", "int"),
    ("local_rank", "int"),
)

# The host's own figures (line["host"]).
HOST_FIELDS = (
    ("cpu_percent", "float"),
    ("cpu_count", "int"),
    ("load_1m", "float"),
    ("load_5m", "float"),
    ("load_15m", "float"),
    ("memory_used_mib", "float"),
    ("memory_total_mib", "float"),
    ("net_rx_bytes_s", "float"),
    ("net_tx_bytes_s", "float"),
    ("disk_read_bytes_s", "float"),
    ("disk_write_bytes_s", "float"),
    ("host_source", "str"),
)

# The keys of one sample line; "gpus" (GPU_FIELDS records) or "nvsmi" (raw CSV rows);
# "health" (HEALTH_KEYS) only when it differs from the last one sent (None: unchanged).
LINE_KEYS = ("t", "gpu_source", "host", "gpu_error", "gpus", "nvsmi", "procs", "health")
NVSMI_KEYS = ("fields", "rows", "apps_fields", "apps_rows")

# nvidia-smi --query-compute-apps fields the sampler asks for.
QUERY_APPS = ("gpu_uuid", "pid", "process_name", "used_gpu_memory")


# One GPU's health (line["health"]["gpus"]), read on a slower tick than the figures:
# (attribute, type, nvidia-smi --query-gpu name or "" where only NVML has it). Values
# travel as NVML gives them (int, "Yes"/"No", the recovery action in words) or, from
# nvidia-smi, as its raw CSV rows (line["health"]["nvsmi"]) that the console parses.
HEALTH_FIELDS = (
    ("index", "int", "index"),
    ("pci_bus_id", "str", "pci.bus_id"),
    ("ecc_uncorrected_volatile", "int", "ecc.errors.uncorrected.volatile.total"),
    ("ecc_uncorrected_aggregate", "int", "ecc.errors.uncorrected.aggregate.total"),
    ("ecc_corrected_volatile", "int", "ecc.errors.corrected.volatile.total"),
    ("ecc_corrected_aggregate", "int", "ecc.errors.corrected.aggregate.total"),
    ("retired_pages_pending", "str", "retired_pages.pending"),
    ("remapped_rows_pending", "str", "remapped_rows.pending"),
    ("remapped_rows_failure", "str", "remapped_rows.failure"),
    ("recovery_action", "str", "gpu_recovery_action"),
    ("clock_events", "int", "clocks_event_reasons.active"),  # NVML's bit mask
    ("pcie_gen", "int", "pcie.link.gen.current"),
    ("pcie_gen_max", "int", "pcie.link.gen.max"),
    ("pcie_width", "int", "pcie.link.width.current"),
    ("pcie_width_max", "int", "pcie.link.width.max"),
    ("fan", "str", "fan.speed"),  # as text: "ERR!" is a failed fan (or its sensor)
    ("nvlink_active", "int", ""),
    ("nvlink_inactive", "int", ""),
)
# One Xid event (line["health"]["xids"]): from the kernel log ("pci" is its PCI address,
# "gpu" None) or from NVML's event set ("gpu" its index, "pci" None).
XID_FIELDS = (
    ("t", "float"),
    ("xid", "int"),
    ("pci", "str"),
    ("gpu", "int"),
    ("text", "str"),
    ("source", "str"),  # "kmsg", "journalctl" or "nvml"
)
# line["health"]: "t" when the GPUs' health was read, "source" ("nvml", "nvidia-smi"),
# "gpus" (HEALTH_FIELDS records) or "nvsmi" ({"fields", "rows"}), "xids" (XID_FIELDS
# records, the most recent last), "xid_source" (where Xids are read from, None: nowhere),
# "xid_error" (why the kernel log cannot be read), "error" ("nvidia-smi not answering
# ...": the GPU reader gave nothing within its bound), "error_since" (epoch seconds) and
# "readers" ({reader: "ErrorType: message"} for each reader thread that died, None: none).
HEALTH_KEYS = (
    "t",
    "source",
    "gpus",
    "nvsmi",
    "xids",
    "xid_source",
    "xid_error",
    "error",
    "error_since",
    "readers",
)

# Reader threads that died, by name: a reader that fails must make its findings
# "unknown" (line["health"]["readers"]), never leave a silent "ok" behind.
READER_FAILURES: dict[str, str] = {}


def reader_failed(name: str, exc: BaseException) -> None:
    READER_FAILURES[name] = f"{type(exc).__name__}: {exc}"[:200]


def reader_thread(name: str, target: object, *args: object) -> threading.Thread:
    """A started daemon thread running ``target(*args)``; an exception that ends it is
    recorded in :data:`READER_FAILURES` under ``name`` (the reader, in words)."""

    def run() -> None:
        try:
            target(*args)  # type: ignore[operator]
        except Exception as exc:  # any bug or surprise: reported as the reader's failure
            reader_failed(name, exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def query_health() -> tuple[str, ...]:
    """nvidia-smi --query-gpu names of the health fields nvidia-smi has."""
    return tuple(f[2] for f in HEALTH_FIELDS if f[2])


def names(fields: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    """The attribute names of a field table."""
    return tuple(f[0] for f in fields)


def query_gpu() -> tuple[str, ...]:
    """nvidia-smi --query-gpu names, in GPU_FIELDS order."""
    return tuple(f[2] for f in GPU_FIELDS)


def record(fields: tuple[tuple[str, ...], ...], values: dict[str, object]) -> dict[str, object]:
    """``values`` as a record with exactly the table's keys (None where not reported).

    A key the table does not know is a producer bug: it raises here, on the host, so
    the contract test catches it instead of the console silently dropping it.
    """
    unknown = set(values) - set(names(fields))
    if unknown:
        raise KeyError("not in the sample schema: " + ", ".join(sorted(unknown)))
    return {name: values.get(name) for name in names(fields)}
