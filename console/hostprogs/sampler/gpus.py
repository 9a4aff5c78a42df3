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
        query = ",".join(query_gpu())
        cmd = ["nvidia-smi", "--query-gpu=" + query, "--format=csv,noheader,nounits"]
        cmd += ["-lms", str(max(100, int(self.interval * 1000)))]
        self.proc = subprocess.Popen(
            cmd,
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
        query = ",".join(QUERY_APPS)
        cmd = ["nvidia-smi", "--query-compute-apps=" + query, "--format=csv,noheader,nounits"]
        timeout = max(5.0, self.interval * 3)
        try:
            status, text = run_capped(cmd, timeout, MAX_APPS_BYTES)
        except OSError as exc:
            return [], str(exc)
        if status is None:
            return [], f"nvidia-smi --query-compute-apps: no answer within {timeout:g} s"
        lines = [ln.strip()[:MAX_ROW_CHARS] for ln in text.splitlines() if ln.strip()]
        del lines[MAX_APP_ROWS:]
        if status != 0:
            return [], " ".join(lines)[:MAX_ERROR_CHARS] or f"exit status {status}"
        return [ln for ln in lines if not ln.lower().startswith("no running")], None

    def stop(self) -> None:
        self._stopping.set()
        if self.alive() and self.proc is not None:
            self.proc.kill()


# What the sampler keeps of nvidia-smi's output is bounded: a stand-in writing without
# end grew it to 0.5-0.8 GB (a line that never ended, 100,000s of made-up GPU indices,
# hundreds of MB of compute-apps rows), and every kept row goes to the console too.
MAX_ROW_CHARS = 4096  # a --query-gpu row is ~300 characters
MAX_GPU_ROWS = 64  # GPU indices kept: more than any host has
MAX_ERROR_CHARS = 300
MAX_APPS_BYTES = 1 << 20  # of one --query-compute-apps answer (~100 bytes a process)
MAX_APP_ROWS = 1024  # GPU processes kept of one answer (each goes to the console)
_SINCE_TICKS: list[float] = []  # own_children's time, in /proc's clock ticks since boot


def bounded_lines(pipe):  # type: ignore[no-untyped-def]
    """The lines of a text pipe, none longer than MAX_ROW_CHARS: the rest of a longer
    line is read and dropped, so memory stays bounded however the writer misbehaves."""
    skipping = False
    while True:
        piece = pipe.readline(MAX_ROW_CHARS)
        if not piece:
            return
        ends = piece.endswith("\n")
        if not skipping and (ends or len(piece) < MAX_ROW_CHARS):
            yield piece
        skipping = not ends and (skipping or len(piece) >= MAX_ROW_CHARS)


def run_capped(cmd: list[str], timeout: float, limit: int) -> tuple[int | None, str]:
    """``cmd``'s exit status and the first ``limit`` bytes of its output, decoded with
    replacement (a cut last line dropped); status None when it gave no end within
    ``timeout``. It is killed past either bound."""
    import os
    import selectors
    import subprocess

    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=dies_with_sampler(),
    )
    assert proc.stdout is not None
    out = bytearray()
    deadline = time.time() + timeout
    ended = False
    with proc.stdout, selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while len(out) < limit:
            left = deadline - time.time()
            if left <= 0 or not selector.select(left):
                break
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                ended = True
                break
            out += chunk
    if not ended:
        proc.kill()
        del out[out.rfind(b"\n") + 1 :]  # a line cut by the limit is no row
    try:
        status = proc.wait(timeout=1.0 if not ended else max(0.1, deadline - time.time()))
    except subprocess.TimeoutExpired:
        proc.kill()  # closed its output, never exited: reaped by a later Popen
        status = None
    if not ended and len(out) < limit:
        status = None  # the deadline passed: no answer
    return status, bytes(out).decode("utf-8", "replace")


def own_children() -> None:
    """Make the sampler the leader of its process group, and end every other process of
    the group as it exits (the console gone, SIGTERM, SIGHUP): a hung nvidia-smi (or any
    reader's child, health queries and journalctl included) no longer outlives it."""
    import atexit
    import contextlib
    import os
    import signal

    with contextlib.suppress(OSError):  # a session leader (ssh's exec) leads one already
        os.setpgid(0, 0)
    if os.getpgrp() != os.getpid():
        return
    try:
        # Only what starts from now on: a setup line's own background process (started
        # by the shell this sampler was exec'd from) is left alone.
        with open("/proc/uptime", "rb") as handle:
            _SINCE_TICKS.append(float(handle.read().split()[0]) * os.sysconf("SC_CLK_TCK") - 1)
    except (OSError, ValueError, IndexError):
        return
    atexit.register(end_children)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _exit_on_signal)


def _exit_on_signal(signum, frame):  # type: ignore[no-untyped-def]
    import sys

    sys.exit(128 + signum)  # through atexit: end_children runs


def end_children() -> None:
    """SIGKILL every other process of the group this sampler leads (read from /proc)."""
    import os
    import signal

    me = os.getpid()
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open("/proc/" + name + "/stat", "rb") as handle:
                stat = handle.read()
            # After "(comm)": state, ppid, pgrp, ... starttime (the 20th).
            fields = stat[stat.rindex(b")") + 2 :].split()
            if int(fields[2]) == me and int(fields[19]) >= _SINCE_TICKS[0]:
                os.kill(int(name), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            continue
