"""The sampler: sent on stdin to ``python3 -u - INTERVAL MODE GPUS SEED`` on each host
(INTERVAL 0: write one sample and exit).

One long-lived process per host writes a hello line (``{"program": "sampler", "v": N}``),
then one JSON sample line per interval (the first at once, without CPU % and
throughput, the second 0.1 s later with them); nothing is spawned per refresh on the
console side. Sample lines hold exactly the keys of ``sample_schema.py``. GPUs come from
NVML (pynvml) when it initialises, else from ``nvidia-smi --query-gpu ... -lms``
streamed by a reader thread (its raw CSV rows go to the console, whose tested parser
reads them), else "no NVIDIA GPU". In ``simulated`` mode the GPUs come from
``simulated.py``. Host figures come from /proc, else (no /proc) psutil when importable.

The program is several files sent as one source (``console/probe/sampler.py``
``program_source``): sample_schema, simulated, sampler_gpus, sampler_host, then this.
Standard library only (plus optional psutil/pynvml); it runs on hosts where nothing
of distconsole is installed. It exits when the console goes away: a write to the
closed channel fails, or the ssh session that started it is gone.
"""

from __future__ import annotations

import json
import os
import sys
import time

if False:  # for type checkers only, without importing typing on the host
    from typing import Any

if __name__ != "__main__":  # imported by the console/tests; on a host the source precedes
    from console.hostprogs.sampler.gpus import NvmlGpus, NvsmiOnce, NvsmiStream
    from console.hostprogs.sampler.health import (
        ANSWER_WITHIN_S,
        HEALTH_EVERY_S,
        XIDS_KEPT,
        Bounded,
        KernelXids,
        NvmlXids,
        NvsmiHealth,
        nvml_health,
    )
    from console.hostprogs.sampler.host import GpuProcessOwners, HostFigures
    from console.hostprogs.sampler.procs import own_children
    from console.hostprogs.sampler.schema import (
        HEALTH_KEYS,
        LINE_KEYS,
        NVSMI_KEYS,
        QUERY_APPS,
        READER_FAILURES,
        query_gpu,
    )
    from console.hostprogs.sampler.simulated import SIMULATED_MODEL, SimulatedGpus

PROGRAM = "sampler"
VERSION = 4  # of its records (1: no hello, a "v" in every line; 2: no "health"; 3: no "readers")
WARMUP_S = 0.1  # from the first line (no CPU % yet) to the second (with it)
ONE_SHOT_BOUND_S = 5.0  # a one-shot line waits this long for a GPU reader, no longer
# "0": no health reading (bench/sampler_health.py's "without"; the console never sets it).
HEALTH_ON = os.environ.get("DISTCONSOLE_SAMPLER_HEALTH") != "0"
# Sixth argument: start no health reader (`gpus` never shows health; each reader is a
# process here: nvidia-smi's health query, journalctl). The GPU processes' owners stay.
NO_HEALTH = "no-health"


class Health:
    """What a line says of the GPUs' health: the readers' latest, sent when it changed."""

    def __init__(self, kernel: KernelXids | None, bound: float) -> None:
        self.kernel = kernel
        self.bound = bound
        self.nvml_xids: NvmlXids | None = None
        self.xids: list[dict[str, object]] = []  # NVML's, as they came
        self.gpus: list[dict[str, object]] | None = None
        self.read_at: float | None = None
        self.due = 0.0
        self.nvsmi: NvsmiHealth | None = None
        self.error: str | None = None
        self.error_since: float | None = None
        self.last: dict[str, object] | None = None

    def nvml_due(self) -> bool:
        return time.time() >= self.due

    def nvml_read(self, gpus: list[dict[str, object]]) -> None:
        self.gpus, self.read_at = gpus, time.time()
        self.due = self.read_at + HEALTH_EVERY_S
        if self.nvml_xids is not None:
            self.xids = (self.xids + self.nvml_xids.poll())[-XIDS_KEPT:]

    def line(self, source: str) -> dict[str, object] | None:
        """The health for this line (None: the same as the last one sent)."""
        h: dict[str, object] = dict.fromkeys(HEALTH_KEYS)
        kernel = self.kernel
        xids = (kernel.poll() if kernel is not None else []) + self.xids
        h.update(xids=sorted(xids, key=lambda x: x["t"] or 0.0)[-XIDS_KEPT:])  # type: ignore[arg-type,return-value]
        sources = ([kernel.source] if kernel is not None and kernel.source else []) + (
            ["nvml"] if self.nvml_xids is not None else []
        )
        h.update(xid_source=", ".join(sources) or None, xid_error=kernel and kernel.error)
        h.update(source=source, t=self.read_at, gpus=self.gpus)
        error, since = self.error, self.error_since
        if self.nvsmi is not None:
            reading, nvsmi_error, nvsmi_since = self.nvsmi.latest()
            if reading is not None:
                h.update(t=reading[0], nvsmi={"fields": reading[1], "rows": reading[2]})
            if error is None and nvsmi_error is not None:
                error, since = nvsmi_error, nvsmi_since
        h.update(error=error, error_since=since, readers=dict(READER_FAILURES) or None)
        if h == self.last:
            return None
        self.last = h
        return h


def write_line(obj: dict[str, object]) -> bool:
    """False when the console is gone (the channel closed)."""
    try:
        sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, OSError):
        return False
    return True


def main(argv: list[str]) -> int:
    interval = float(argv[0]) if argv else 1.0
    mode = argv[1] if len(argv) > 1 else "auto"
    sim_count = int(argv[2]) if len(argv) > 2 else 0
    seed = argv[3] if len(argv) > 3 else "host"
    model = argv[4] if len(argv) > 4 else SIMULATED_MODEL
    readers = HEALTH_ON and NO_HEALTH not in argv[5:]
    parent = os.getppid()
    own_children()  # its nvidia-smi readers end with it, hung ones included
    if not write_line({"program": PROGRAM, "v": VERSION}):
        return 0
    host = HostFigures()
    owners = GpuProcessOwners()
    source = "none"
    gpu_error = None
    nvml = sim = None
    stream: NvsmiOnce | NvsmiStream | None = None
    # A GPU reader (NVML call, nvidia-smi) silent this long is "not answering": a host
    # finding, reported on the next line; the stuck call is left alone, never waited on.
    bound = ONE_SHOT_BOUND_S if interval <= 0 else max(ANSWER_WITHIN_S, 3 * interval)
    guard = Bounded()
    health = Health(KernelXids() if readers and mode != "simulated" else None, bound)
    if not readers:
        health.due = float("inf")  # NVML's health reading never due
    if mode == "simulated":
        sim, source = SimulatedGpus(seed, sim_count or 4, model), "simulated"
    else:
        try:
            done, nvml = guard.call(NvmlGpus, bound)
            source = "nvml"
            if done and readers:
                health.nvml_xids = _nvml_xids(nvml)
        except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, ...
            gpu_error = f"NVML unavailable ({type(exc).__name__}: {exc})"
        if source != "nvml" and _on_path("nvidia-smi"):
            source = "nvidia-smi"
            health.nvsmi = NvsmiHealth(bound=bound) if readers else None
            if interval <= 0:
                # A one-shot line is all there is: wait for nvidia-smi as long as a stream
                # would (a busy host's nvidia-smi can take seconds to start).
                stream = NvsmiOnce(ONE_SHOT_BOUND_S)
                if health.nvsmi is not None:
                    health.nvsmi.first.wait(bound + 1.0)
            else:
                loop = NvsmiStream(interval)
                loop.wait_first(min(5.0, interval * 3 + 1))
                stream = loop
        elif source != "nvml":
            gpu_error = f"no NVIDIA GPU: {gpu_error}; nvidia-smi not found"
    if interval <= 0 and health.kernel is not None:
        health.kernel.first.wait(bound)  # journalctl's first read, where it is the source
    if interval <= 0:
        # One line only: CPU % and throughput are differences, give them a window.
        time.sleep(max(0.0, 0.1 - (time.time() - host.cpu_since)))
    # Streaming: the first line goes out at once (the console's first frame waits for
    # it), its CPU % and rates not reported yet (a window of a few ms is noise); a second
    # line follows after a short window with them, then one line per interval.
    warming = interval > 0
    tick = time.time()
    while True:
        line: dict[str, object] = dict.fromkeys(LINE_KEYS)
        line.update(t=time.time(), gpu_source=source, host=host.sample(), procs={})
        pids: list[int] = []
        if source == "nvml":
            gpu_error = _nvml_line(line, pids, nvml, guard, health)
        elif sim is not None:
            gpus, pids = sim.sample()
            line["gpus"] = gpus
        elif stream is not None:
            rows, error = stream.latest()
            silent = stream.silent_for()
            if silent >= bound and not rows:
                error = f"nvidia-smi not answering (no GPU row for {silent:.0f} s)"
                health.error, health.error_since = "nvidia-smi not answering", time.time() - silent
            else:
                health.error = health.error_since = None
            apps, apps_error = stream.apps()
            line["nvsmi"] = dict(
                zip(NVSMI_KEYS, (list(query_gpu()), rows, list(QUERY_APPS), apps))  # noqa: B905 (hosts may run Python < 3.10)
            )
            for row in apps:
                cell = row.split(",")[1].strip() if row.count(",") >= 1 else ""
                if cell.isascii() and cell.isdigit():
                    pids.append(int(cell))
            gpu_error = error or apps_error
        line["gpu_error"] = gpu_error
        if sim is None and HEALTH_ON:
            line["health"] = health.line(source)
            line["procs"] = owners.get(pids)
        if not write_line(line):
            break  # the console is gone
        if interval <= 0 or os.getppid() != parent:
            break  # one-shot (interval 0), or the ssh session that started us ended
        if warming:
            warming = False
            time.sleep(min(interval, WARMUP_S))
            tick = time.time()
            continue
        tick += interval
        delay = tick - time.time()
        if delay < 0:
            tick = time.time()  # fell behind (suspended?): do not burst to catch up
        else:
            time.sleep(delay)
    if stream is not None:
        stream.stop()
    return 0


def _on_path(name: str) -> bool:
    """shutil.which's answer, without importing shutil (and bz2, lzma) on every host."""
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or ".", name)
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            return True
    return False


def _nvml_xids(nvml: Any) -> NvmlXids | None:
    try:
        return NvmlXids(nvml.nv, nvml.count)
    except Exception:  # no event support (a driver or a board): the kernel log still tells
        return None


def _nvml_line(
    line: dict[str, object], pids: list[int], nvml: Any, guard: Bounded, health: Health
) -> str | None:
    """Reads NVML within the bound into ``line`` (and ``pids``); its gpu_error."""
    due = HEALTH_ON and health.nvml_due()

    def read() -> tuple[tuple[list[dict[str, object]], list[int]], Any]:
        return nvml.sample(), nvml_health(nvml.nv, nvml.count) if due else None

    done, got = False, None  # type: tuple[bool, Any]
    try:
        if nvml is not None:  # None: nvmlInit itself did not return
            done, got = guard.call(read, health.bound)
    except Exception as exc:  # an NVML error that is not a figure's
        health.error, health.error_since = None, None
        return f"NVML failed ({type(exc).__name__}: {exc})"
    if not done:
        since = guard.since or time.time()
        health.error, health.error_since = "NVML not answering", since
        line["gpus"] = []
        return f"NVML not answering (no reply for {time.time() - since:.0f} s)"
    (gpus, found), read_health = got
    health.error = health.error_since = None
    if read_health is not None:
        health.nvml_read(read_health)
    line["gpus"] = gpus
    pids.extend(found)
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
