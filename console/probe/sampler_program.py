"""The sampler: sent on stdin to ``python3 -u - INTERVAL MODE GPUS SEED`` on each host
(INTERVAL 0: write one line and exit).

One long-lived process per host writes one JSON line per interval (the first at once,
without CPU % and throughput, the second 0.1 s later with them); nothing is spawned per
refresh on the console side. GPUs come from NVML (pynvml) when it initialises,
else from ``nvidia-smi --query-gpu ... -lms`` streamed by a reader thread (its raw CSV
rows go to the console, whose tested parser reads them), else "no NVIDIA GPU". In
``simulated`` mode the GPUs come from :mod:`console.probe.simulated`, whose source is
sent ahead of this one. Host figures come from psutil when importable, else /proc.

Standard library only (plus optional psutil/pynvml); it runs on hosts where nothing
of distconsole is installed. It exits when the console goes away: a write to the
closed channel fails, or the ssh session that started it is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

# Imported where used: every host starts this program (a cluster of them at once), and
# most never need nvidia-smi's subprocess/thread, or a user name (pwd).
if False:  # for type checkers only, without importing typing on the host
    import subprocess

if __name__ != "__main__":  # imported by the console/tests; on a host the source precedes
    from console.probe.simulated import SimulatedGpus, job_of

QUERY_GPU = (
    "index,uuid,name,utilization.gpu,utilization.memory,memory.used,memory.total,"
    "temperature.gpu,power.draw,power.limit,fan.speed,pstate,clocks.current.sm,"
    "clocks.current.memory,ecc.errors.corrected.volatile.total,"
    "ecc.errors.uncorrected.volatile.total,mig.mode.current"
)
QUERY_APPS = "gpu_uuid,pid,process_name,used_gpu_memory"
MIB = 1024.0 * 1024.0
MIN_WINDOW_S = 0.05  # shortest window over which CPU % and throughput mean something
WARMUP_S = 0.1  # from the first line (no CPU % yet) to the second (with it)


def _try(fn, *args):  # type: ignore[no-untyped-def]
    try:
        return fn(*args)
    except Exception:  # any driver error means "not reported"
        return None


class NvmlGpus:
    """GPUs read through NVML; raises at construction when NVML is unusable."""

    def __init__(self) -> None:
        import pynvml

        self.nv = pynvml
        pynvml.nvmlInit()
        self.count = pynvml.nvmlDeviceGetCount()

    @staticmethod
    def _str(value: object) -> str | None:
        if value is None:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)

    def sample(self) -> tuple[list[dict[str, object]], list[int]]:
        nv = self.nv
        gpus = []
        pids = []
        for i in range(self.count):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            util = _try(nv.nvmlDeviceGetUtilizationRates, h)
            mem = _try(nv.nvmlDeviceGetMemoryInfo, h)
            power = _try(nv.nvmlDeviceGetPowerUsage, h)
            limit = _try(nv.nvmlDeviceGetEnforcedPowerLimit, h)
            pstate = _try(nv.nvmlDeviceGetPerformanceState, h)
            mig = _try(nv.nvmlDeviceGetMigMode, h)
            ecc = nv.NVML_VOLATILE_ECC
            procs = []
            for p in _try(nv.nvmlDeviceGetComputeRunningProcesses, h) or []:
                used = getattr(p, "usedGpuMemory", None)
                procs.append({"pid": p.pid, "used_memory_mib": used / MIB if used else None})
                pids.append(p.pid)
            gpus.append(
                {
                    "index": i,
                    "uuid": self._str(_try(nv.nvmlDeviceGetUUID, h)),
                    "name": self._str(_try(nv.nvmlDeviceGetName, h)),
                    "utilization_gpu": util.gpu if util else None,
                    "utilization_memory": util.memory if util else None,
                    "memory_used_mib": mem.used / MIB if mem else None,
                    "memory_total_mib": mem.total / MIB if mem else None,
                    "temperature_c": _try(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
                    "power_draw_w": power / 1000.0 if power is not None else None,
                    "power_limit_w": limit / 1000.0 if limit is not None else None,
                    "fan_percent": _try(nv.nvmlDeviceGetFanSpeed, h),
                    "pstate": f"P{pstate}" if isinstance(pstate, int) and pstate < 32 else None,
                    "clock_sm_mhz": _try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                    "clock_mem_mhz": _try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
                    "ecc_corrected": _try(
                        nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, ecc
                    ),
                    "ecc_uncorrected": _try(
                        nv.nvmlDeviceGetTotalEccErrors,
                        h,
                        nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                        ecc,
                    ),
                    "mig_mode": ("Enabled" if mig[0] else "Disabled") if mig else None,
                    "processes": procs,
                }
            )
        return gpus, pids


class NvsmiStream:
    """``nvidia-smi --query-gpu -lms``: nvidia-smi's own loop; the latest row per GPU."""

    def __init__(self, interval: float) -> None:
        import threading

        self.interval = interval
        self.rows: dict[str, tuple[float, str]] = {}
        self.error: str | None = None
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[str] | None = None
        self.started = 0.0
        self.start()

    def start(self) -> None:
        import subprocess
        import threading

        self.started = time.time()
        cmd = ["nvidia-smi", "--query-gpu=" + QUERY_GPU, "--format=csv,noheader,nounits"]
        cmd += ["-lms", str(max(100, int(self.interval * 1000)))]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.strip()
            index = line.split(",", 1)[0].strip()
            with self.lock:
                if index.isdigit():
                    self.rows[index] = (time.time(), line)
                    self.error = None
                elif line:
                    self.error = line  # "NVIDIA-SMI has failed because ..."
        proc.wait()
        with self.lock:
            self.error = self.error or f"nvidia-smi exited with status {proc.returncode}"

    def wait_first(self, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline and not self.rows and self.alive():
            time.sleep(0.01)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def latest(self) -> tuple[list[str], str | None]:
        if not self.alive() and time.time() - self.started > 10:
            self.start()  # the driver came back, or a transient failure
        cutoff = time.time() - max(3.0, 3 * self.interval)
        with self.lock:
            fresh = [(int(i), line) for i, (t, line) in self.rows.items() if t >= cutoff]
            return [line for _, line in sorted(fresh)], self.error

    def apps(self) -> tuple[list[str], str | None]:
        import subprocess

        cmd = ["nvidia-smi", "--query-compute-apps=" + QUERY_APPS, "--format=csv,noheader,nounits"]
        try:
            out = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=max(5.0, self.interval * 3),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return [], str(exc)
        lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
        if out.returncode != 0:
            return [], " ".join(lines) or f"exit status {out.returncode}"
        return [ln for ln in lines if not ln.lower().startswith("no running")], None

    def stop(self) -> None:
        if self.alive() and self.proc is not None:
            self.proc.kill()


class HostFigures:
    """CPU %, load, memory, network and disk throughput: psutil, else /proc."""

    def __init__(self) -> None:
        try:
            import psutil

            self.ps = psutil
            psutil.cpu_percent(None)
            self.source = "psutil"
        except ImportError:
            self.ps = None
            self.source = "proc"
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
            with open("/proc/net/dev") as f:
                for line in f.readlines()[2:]:
                    name, _, data = line.partition(":")
                    if name.strip() != "lo":
                        cols = data.split()
                        rx += float(cols[0])
                        tx += float(cols[8])
            rd = wr = 0.0
            with open("/proc/diskstats") as f:
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
        return out

    def _window(self) -> bool:
        return time.time() - self.cpu_since > MIN_WINDOW_S


class ProcessInfo:
    """User, command line and job/rank of GPU processes; read once per pid."""

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
        return info


def main(argv: list[str]) -> int:
    interval = float(argv[0]) if argv else 1.0
    mode = argv[1] if len(argv) > 1 else "auto"
    sim_count = int(argv[2]) if len(argv) > 2 else 0
    seed = argv[3] if len(argv) > 3 else "host"
    parent = os.getppid()
    host = HostFigures()
    procs = ProcessInfo()
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
            stream.wait_first(min(5.0, interval * 3 + 1))
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
        line: dict[str, object] = {"v": 1, "t": time.time(), "gpu_source": source}
        line["host"] = host.sample()
        pids: list[int] = []
        if nvml is not None or sim is not None:
            gpus, pids = nvml.sample() if nvml is not None else sim.sample()  # type: ignore[union-attr]
            line["gpus"] = gpus
        elif stream is not None:
            rows, error = stream.latest()
            apps, apps_error = stream.apps()
            line["nvsmi"] = {
                "fields": QUERY_GPU.split(","),
                "rows": rows,
                "apps_fields": QUERY_APPS.split(","),
                "apps_rows": apps,
            }
            for row in apps:
                cell = row.split(",")[1].strip() if row.count(",") >= 1 else ""
                if cell.isdigit():
                    pids.append(int(cell))
            gpu_error = error or apps_error
        line["gpu_error"] = gpu_error
        if sim is None:
            line["procs"] = procs.get(pids)
        try:
            sys.stdout.write(json.dumps(line, separators=(",", ":")) + "\n")
            sys.stdout.flush()
        except (BrokenPipeError, OSError):
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
