"""The sampler's GPU readers: NVML (pynvml) when it initialises, else nvidia-smi's own loop.

Part of the sampler program (see ``sampler_program.py``): runs on the host, standard
library only plus optional pynvml. Records are built with the sample schema's
:func:`record`, so their keys are the schema's and nothing else.
"""

from __future__ import annotations

import time

# Imported where used: every host starts this program (a cluster of them at once), and
# most never need nvidia-smi's subprocess/thread.
if False:  # for type checkers only, without importing typing on the host
    import subprocess

if __name__ != "__main__":  # imported by the console/tests; on a host the source precedes
    from console.hostprogs.sampler.health import dies_with_sampler
    from console.hostprogs.sampler.procs import (
        MAX_APP_ROWS,
        MAX_APPS_BYTES,
        MAX_ERROR_CHARS,
        MAX_GPU_ROWS,
        MAX_ROW_CHARS,
        bounded_lines,
        run_all,
        run_capped,
    )
    from console.hostprogs.sampler.schema import (
        GPU_FIELDS,
        GPU_PROCESSES,
        MIB,
        PROCESS_FIELDS,
        QUERY_APPS,
        query_gpu,
        reader_thread,
        record,
    )


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
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

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
                procs.append(
                    record(
                        PROCESS_FIELDS,
                        {"pid": p.pid, "used_memory_mib": used / MIB if used else None},
                    )
                )
                pids.append(p.pid)
            gpu = record(
                GPU_FIELDS,
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
                },
            )
            gpu[GPU_PROCESSES] = procs
            gpus.append(gpu)
        return gpus, pids


# Seconds between two asks for the GPU processes (at least the interval).
APPS_EVERY_S = 2.0


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
        self.last_row = 0.0  # when nvidia-smi last wrote a GPU row
        self.start()
        # The GPU processes are asked for by a thread of their own, at once (while the
        # stream starts, not after it) and then every APPS_EVERY_S: each answer is a
        # whole nvidia-smi start, which no sample line should wait for.
        self._apps: tuple[list[str], str | None] = ([], "no answer from nvidia-smi yet")
        self._apps_ready = threading.Event()
        self._stopping = threading.Event()
        reader_thread("nvidia-smi --query-compute-apps", self._apps_loop)

    def start(self) -> None:
        import subprocess

        self.started = time.time()
        self.proc = subprocess.Popen(
            gpu_command("-lms", str(max(100, int(self.interval * 1000)))),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            # Not text=True (the locale's codec, strict): one odd byte in a GPU name
            # raised in the reader thread and every later row was lost.
            encoding="utf-8",
            errors="replace",
            bufsize=1,
            preexec_fn=dies_with_sampler(),
        )
        reader_thread("nvidia-smi -lms", self._read, self.proc)

    def _read(self, proc: subprocess.Popen[str]) -> None:
        try:
            self._read_rows(proc)
        except Exception:
            proc.kill()  # nobody reads it now: latest() starts another one
            raise

    def _read_rows(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in bounded_lines(proc.stdout):
            line = line.strip()
            index = line.split(",", 1)[0].strip()
            with self.lock:
                if index.isascii() and index.isdigit():  # int() refuses "²"
                    if index not in self.rows and len(self.rows) >= MAX_GPU_ROWS:
                        continue  # a flood of made-up GPU indices, not a host's GPUs
                    self.last_row = time.time()
                    self.rows[index] = (self.last_row, line)
                    self.error = None
                elif line:
                    self.error = line[:MAX_ERROR_CHARS]  # "NVIDIA-SMI has failed because ..."
        proc.wait()
        with self.lock:
            self.error = self.error or f"nvidia-smi exited with status {proc.returncode}"

    def wait_first(self, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline and not self.rows and self.alive():
            time.sleep(0.01)

    def silent_for(self) -> float:
        """Seconds a running nvidia-smi has written no GPU row (0: it is not running)."""
        if not self.alive():
            return 0.0
        return time.time() - max(self.started, self.last_row)

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
        """The latest compute-apps rows (the first call waits for the first answer)."""
        self._apps_ready.wait(max(5.0, self.interval * 3))
        with self.lock:
            return self._apps

    def _apps_loop(self) -> None:
        every = max(self.interval, APPS_EVERY_S)
        try:
            while True:
                answer = self._query_apps()
                with self.lock:
                    self._apps = answer
                self._apps_ready.set()
                if self._stopping.wait(every):
                    return
        finally:
            self._apps_ready.set()  # a reader that died: no line waits for it again

    def _query_apps(self) -> tuple[list[str], str | None]:
        timeout = max(5.0, self.interval * 3)
        try:
            status, text = run_capped(apps_command(), timeout, MAX_APPS_BYTES)
        except OSError as exc:
            return [], str(exc)
        return apps_answer(status, text, timeout)

    def stop(self) -> None:
        self._stopping.set()
        if self.alive() and self.proc is not None:
            self.proc.kill()


def gpu_command(*loop: str) -> list[str]:
    query = ",".join(query_gpu())
    return ["nvidia-smi", "--query-gpu=" + query, "--format=csv,noheader,nounits", *loop]


def apps_command() -> list[str]:
    query = ",".join(QUERY_APPS)
    return ["nvidia-smi", "--query-compute-apps=" + query, "--format=csv,noheader,nounits"]


def apps_answer(status: int | None, text: str, timeout: float) -> tuple[list[str], str | None]:
    """The compute-apps rows of one answer, or why there are none."""
    if status is None:
        return [], f"nvidia-smi --query-compute-apps: no answer within {timeout:g} s"
    lines = [ln.strip()[:MAX_ROW_CHARS] for ln in text.splitlines() if ln.strip()]
    del lines[MAX_APP_ROWS:]
    if status != 0:
        return [], " ".join(lines)[:MAX_ERROR_CHARS] or f"exit status {status}"
    return [ln for ln in lines if not ln.lower().startswith("no running")], None


class NvsmiOnce:
    """A one-shot line's GPUs (``gpus``): nvidia-smi's two queries started together,
    each answering once, both awaited within ``bound``; NvsmiStream's interface. No
    ``-lms`` loop to stop and no reader thread: 64 hosts' samplers on one machine spent
    their CPU starting those, and the loop wrote rows no one-shot line reads."""

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self.silent = 0.0
        self.rows: list[str] = []
        self.error: str | None = None
        self._apps: tuple[list[str], str | None] = ([], None)
        try:
            answers = run_all([gpu_command(), apps_command()], bound, MAX_APPS_BYTES)
        except OSError as exc:
            self.error = str(exc)
            self._apps = ([], self.error)
            return
        (status, text), (apps_status, apps_text) = answers
        self._apps = apps_answer(apps_status, apps_text, bound)
        rows: dict[int, str] = {}
        for line in text.splitlines():
            line = line.strip()[:MAX_ROW_CHARS]
            index = line.split(",", 1)[0].strip()
            if index.isascii() and index.isdigit():  # int() refuses "²"
                if len(rows) < MAX_GPU_ROWS:
                    rows.setdefault(int(index), line)
            elif line:
                self.error = line[:MAX_ERROR_CHARS]  # "NVIDIA-SMI has failed because ..."
        self.rows = [line for _, line in sorted(rows.items())]
        if status is None:
            self.silent = bound  # the line says "not answering"
        elif status != 0 or not self.rows:
            self.error = self.error or f"nvidia-smi exited with status {status}"
        else:
            self.error = None

    def silent_for(self) -> float:
        return self.silent

    def latest(self) -> tuple[list[str], str | None]:
        return self.rows, self.error

    def apps(self) -> tuple[list[str], str | None]:
        return self._apps

    def stop(self) -> None:
        return None  # both ended or were killed in run_all
