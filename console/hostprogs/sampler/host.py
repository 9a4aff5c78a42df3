"""The sampler's host figures (CPU, load, memory, network, disk) and GPU process owners.

Part of the sampler program (see ``sampler_program.py``): runs on the host, standard
library only plus optional psutil. Records are built with the sample schema's
:func:`record`, so their keys are the schema's and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import time

if __name__ != "__main__":  # imported by the console/tests; on a host the source precedes
    from console.hostprogs.sampler.schema import (
        HOST_FIELDS,
        MIB,
        PROCESS_OWNER_FIELDS,
        record,
    )
    from console.hostprogs.sampler.simulated import job_of

MIN_WINDOW_S = 0.05  # shortest window over which CPU % and throughput mean something


class HostFigures:
    """CPU %, load, memory, network and disk throughput: /proc, else psutil.

    /proc first: psutil reads the same files on Linux, and importing it costs every
    sampler start ~20 ms of the host's CPU (a snapshot of 256 hosts starts 256).
    """

    def __init__(self) -> None:
        self.ps = None
        self.source = "proc"
        if self._proc_cpu() is None:  # not Linux (or no /proc): psutil if installed
            try:
                import psutil

                self.ps = psutil
                psutil.cpu_percent(None)
                self.source = "psutil"
            except ImportError:
                pass
        self.last_cpu = self._proc_cpu() if self.ps is None else None
        self.last_io = (time.time(), self._io())
        self.cpu_since = time.time()

    @staticmethod
    def _proc_cpu() -> tuple[float, float] | None:
        try:
            with open("/proc/stat") as f:
                parts = [float(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = parts[3] + (parts[4] if len(parts) > 4 else 0.0)
        return sum(parts), idle

    def _io(self) -> tuple[float, float, float, float] | None:
        try:
            if self.ps is not None:
                nics = self.ps.net_io_counters(pernic=True)
                rx = sum(v.bytes_recv for k, v in nics.items() if k != "lo")
                tx = sum(v.bytes_sent for k, v in nics.items() if k != "lo")
                disk = self.ps.disk_io_counters()
                return (
                    rx,
                    tx,
                    float(disk.read_bytes if disk else 0),
                    float(disk.write_bytes if disk else 0),
                )
            rx = tx = 0.0
            # An interface or disk name is bytes the kernel took as given: decoded with
            # replacement, one odd name does not lose every figure.
            with open("/proc/net/dev", encoding="utf-8", errors="replace") as f:
                for line in f.readlines()[2:]:
                    name, _, data = line.partition(":")
                    if name.strip() != "lo":
                        cols = data.split()
                        rx += float(cols[0])
                        tx += float(cols[8])
            rd = wr = 0.0
            with open("/proc/diskstats", encoding="utf-8", errors="replace") as f:
                for line in f:
                    cols = line.split()
                    if os.path.exists(f"/sys/block/{cols[2]}") and not cols[2].startswith("loop"):
                        rd += float(cols[5]) * 512
                        wr += float(cols[9]) * 512
            return rx, tx, rd, wr
        except (OSError, ValueError, IndexError, AttributeError):
            return None

    def sample(self) -> dict[str, object]:
        out: dict[str, object] = {"host_source": self.source, "cpu_count": os.cpu_count()}
        if self.ps is not None:
            busy = self.ps.cpu_percent(None)
            # psutil compares with its previous call: over a few ms the figure is noise.
            out["cpu_percent"] = busy if self._window() else None
            vm = self.ps.virtual_memory()
            out["memory_total_mib"] = vm.total / MIB
            out["memory_used_mib"] = (vm.total - vm.available) / MIB
        else:
            now = self._proc_cpu()
            if now and self.last_cpu and now[0] > self.last_cpu[0] and self._window():
                total, idle = now[0] - self.last_cpu[0], now[1] - self.last_cpu[1]
                out["cpu_percent"] = round(100.0 * (total - idle) / total, 1)
            self.last_cpu = now
            try:
                info = {}
                with open("/proc/meminfo") as f:
                    for line in f:
                        key, _, rest = line.partition(":")
                        info[key] = float(rest.split()[0]) / 1024.0
                out["memory_total_mib"] = info["MemTotal"]
                out["memory_used_mib"] = info["MemTotal"] - info.get(
                    "MemAvailable", info["MemFree"]
                )
            except (OSError, KeyError, ValueError, IndexError):
                pass
        with contextlib.suppress(OSError):
            out["load_1m"], out["load_5m"], out["load_15m"] = os.getloadavg()
        t, io = time.time(), self._io()
        t0, io0 = self.last_io
        if io and io0 and t - t0 > MIN_WINDOW_S:
            names = ("net_rx_bytes_s", "net_tx_bytes_s", "disk_read_bytes_s", "disk_write_bytes_s")
            for name, a, b in zip(names, io0, io):  # noqa: B905 (hosts may run Python < 3.10)
                out[name] = max(0.0, (b - a) / (t - t0))
        self.last_io = (t, io)
        self.cpu_since = time.time()
        return record(HOST_FIELDS, out)

    def _window(self) -> bool:
        return time.time() - self.cpu_since > MIN_WINDOW_S


class GpuProcessOwners:
    """Who runs each GPU process: user, command line, job and rank; read once per pid."""

    def __init__(self) -> None:
        self.cache: dict[int, dict[str, object]] = {}

    def get(self, pids: list[int]) -> dict[str, dict[str, object]]:
        for gone in set(self.cache) - set(pids):
            del self.cache[gone]
        out = {}
        for pid in pids:
            if pid not in self.cache:
                self.cache[pid] = self._read(pid)
            out[str(pid)] = self.cache[pid]
        return out

    @staticmethod
    def _read(pid: int) -> dict[str, object]:
        info: dict[str, object] = {}
        import pwd

        with contextlib.suppress(OSError, KeyError):
            info["user"] = pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
            if argv:
                info["command"] = " ".join(argv)
        except OSError:
            pass
        job = job_of(pid)
        if job:
            info.update(job)
        return record(PROCESS_OWNER_FIELDS, info)
