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

if __name__ != "__main__":  # imported by the console/tests; on a host the source precedes
    from console.hostprogs.sampler.gpus import NvmlGpus, NvsmiStream
    from console.hostprogs.sampler.host import GpuProcessOwners, HostFigures
    from console.hostprogs.sampler.schema import (
        LINE_KEYS,
        NVSMI_KEYS,
        QUERY_APPS,
        query_gpu,
    )
    from console.hostprogs.sampler.simulated import SimulatedGpus

PROGRAM = "sampler"
VERSION = 2  # of its records (1: no hello, a "v" in every line)
WARMUP_S = 0.1  # from the first line (no CPU % yet) to the second (with it)


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
    parent = os.getppid()
    if not write_line({"program": PROGRAM, "v": VERSION}):
        return 0
    host = HostFigures()
    owners = GpuProcessOwners()
    source = "none"
    gpu_error = None
    nvml = stream = sim = None
    if mode == "simulated":
        sim, source = SimulatedGpus(seed, sim_count or 4), "simulated"
    else:
        try:
            nvml, source = NvmlGpus(), "nvml"
        except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, ...
            gpu_error = f"NVML unavailable ({type(exc).__name__}: {exc})"
        import shutil

        if nvml is None and shutil.which("nvidia-smi"):
            stream, source = NvsmiStream(interval), "nvidia-smi"
            # A one-shot line is all there is: wait for nvidia-smi as long as a stream
            # would (a busy host's nvidia-smi can take seconds to start).
            stream.wait_first(5.0 if interval <= 0 else min(5.0, interval * 3 + 1))
        elif nvml is None:
            gpu_error = f"no NVIDIA GPU: {gpu_error}; nvidia-smi not found"
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
        if nvml is not None or sim is not None:
            gpus, pids = nvml.sample() if nvml is not None else sim.sample()  # type: ignore[union-attr]
            line["gpus"] = gpus
        elif stream is not None:
            rows, error = stream.latest()
            apps, apps_error = stream.apps()
            line["nvsmi"] = dict(
                zip(NVSMI_KEYS, (list(query_gpu()), rows, list(QUERY_APPS), apps))  # noqa: B905 (hosts may run Python < 3.10)
            )
            for row in apps:
                cell = row.split(",")[1].strip() if row.count(",") >= 1 else ""
                if cell.isdigit():
                    pids.append(int(cell))
            gpu_error = error or apps_error
        line["gpu_error"] = gpu_error
        if sim is None:
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
