"""Pre-flight's health gate: a launch onto a failing GPU is refused, naming the host, the
GPU, the reason and how to go on; a warning GPU only warns. ``exclude_unhealthy`` is the
``--exclude-unhealthy`` way on: the job placed on the other GPUs (CUDA_VISIBLE_DEVICES in
the host's environment) or, where too few are left, the other hosts.

Pure functions of the verdicts, which arrive through :data:`HealthCheck`: the caller
(``distconsole launch``, the console's launch form) reads them with the probe layer,
which pre-flight does not import (jobs and probe are siblings).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from console.errors import JobSpecError
from console.inventory import Host, Inventory
from console.jobs.preflight.checks import Finding, HostRequest, Severity
from console.jobs.spec import JobSpec

HOW_ON = (
    "launch with --exclude-unhealthy to place the job on the other GPUs/hosts, "
    "or --allow-unhealthy to start anyway"
)


class HealthRow(Protocol):
    """One GPU's verdict (``console.probe.health.GpuVerdict``); ``gpu`` None: the host."""

    @property
    def host(self) -> str: ...
    @property
    def gpu(self) -> int | None: ...
    @property
    def state(self) -> str: ...
    @property
    def reasons(self) -> tuple[str, ...]: ...


# Host names -> every GPU's verdict on them (one fresh sample of each host).
HealthCheck = Callable[[Sequence[str]], Awaitable[Sequence[HealthRow]]]


def job_gpus(host: Host, slots: int) -> list[int]:
    """The GPU indices the job's ranks on ``host`` use: CUDA_VISIBLE_DEVICES from the
    host's environment where it names indices, else the first ``slots``."""
    visible = host.env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        cells = [c.strip() for c in visible.split(",") if c.strip()]
        if all(c.isdigit() for c in cells):
            return [int(c) for c in cells][:slots] if slots else [int(c) for c in cells]
    return list(range(slots))


def judge_health(
    requests: Sequence[HostRequest], rows: Sequence[HealthRow], *, allow: bool = False
) -> list[Finding]:
    """Findings for the GPUs (and hosts) the job uses: ``fail`` is an error (a warning
    when ``allow``: --allow-unhealthy), ``warn`` a warning, and so is ``busy`` (another
    process on a GPU of the job's)."""
    by_host: dict[str, list[HealthRow]] = {}
    for row in rows:
        by_host.setdefault(row.host, []).append(row)
    found: list[Finding] = []
    for req in requests:
        if not req.gpus:
            continue  # no GPU of this host is the job's (a PS task, a CPU job)
        used = set(job_gpus(req.host, req.gpus))
        for row in by_host.get(req.host.name, ()):
            if row.state == "ok" or (row.gpu is not None and row.gpu not in used):
                continue
            if row.state == "busy":  # probe.health_check.BusyGpu: processes on it
                message = f"GPU {row.gpu} already used by other processes: {', '.join(row.reasons)}"
                found.append(Finding("gpu-busy", "warning", message, req.host.name))
                continue
            what = "the host" if row.gpu is None else f"GPU {row.gpu}"
            severity: Severity
            why = "; ".join(row.reasons) or row.state
            if row.state == "fail":
                severity = "warning" if allow else "error"
                after = "started anyway (--allow-unhealthy)" if allow else HOW_ON
                message = f"{what} fails its health check: {why}; {after}"
            else:
                severity, message = "warning", f"{what} health warning: {why}"
            found.append(Finding("health", severity, message, req.host.name))
    return found


def exclude_unhealthy(
    inventory: Inventory,
    spec: JobSpec,
    hosts: Sequence[str],
    rows: Sequence[HealthRow],
) -> tuple[Inventory, JobSpec, list[str]]:
    """The inventory and spec with failing GPUs left out (``--exclude-unhealthy``): a host
    with some failing GPUs keeps the others (CUDA_VISIBLE_DEVICES, and its GPU count);
    a host-level failure, or fewer healthy GPUs than ``--gpus-per-host``, drops the host.
    Returns the notes that say what was left out."""
    failing: dict[str, set[int]] = {}
    down: set[str] = set()
    counts: dict[str, int] = {}
    for row in rows:
        if row.gpu is not None:
            counts[row.host] = max(counts.get(row.host, 0), row.gpu + 1)
        if row.state == "fail" and row.gpu is None:
            down.add(row.host)
        elif row.state == "fail" and row.gpu is not None:
            failing.setdefault(row.host, set()).add(row.gpu)
    notes: list[str] = []
    kept: list[str] = []
    replaced: dict[str, Host] = {}
    for name in hosts:
        host = inventory.get(name)
        bad = failing.get(name, set())
        if name in down:
            notes.append(f"{name} left out: the host fails its health check")
            continue
        if not bad:
            kept.append(name)
            continue
        total = host.gpus if isinstance(host.gpus, int) else counts.get(name, 0)
        healthy = [i for i in range(total) if i not in bad]
        need = spec.gpus_per_host or 0
        if not healthy or len(healthy) < need:
            notes.append(
                f"{name} left out: GPU {', '.join(str(g) for g in sorted(bad))} failing "
                f"and {len(healthy)} healthy left"
            )
            continue
        env = {**host.env, "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in healthy)}
        replaced[name] = host.model_copy(update={"env": env, "gpus": len(healthy)})
        kept.append(name)
        left_out = ", ".join(str(g) for g in sorted(bad))
        notes.append(
            f"{name}: GPU {left_out} left out; the job uses GPU {env['CUDA_VISIBLE_DEVICES']}"
        )
    if not kept:
        raise JobSpecError(
            "hosts", "--exclude-unhealthy left no host to place the job on: " + "; ".join(notes)
        )
    hosts_new = tuple(replaced.get(h.name, h) for h in inventory.hosts)
    return (
        inventory.model_copy(update={"hosts": hosts_new}),
        spec.model_copy(update={"hosts": tuple(kept)}),
        notes,
    )
