"""The sampler's health readers: each GPU's ECC, row remapping, recovery action, clock
events and PCIe link through one ``nvidia-smi --query-gpu`` on a slower tick (NVML's
reading is ``nvml.py``'s), Xid events from the kernel log, and a bound on every GPU
read: a reader that does not answer is reported, never waited on.

Part of the sampler program (see ``program.py``): runs on the host, standard library
only plus optional pynvml. Records are built with the sample schema's :func:`record`.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time

if False:  # for type checkers only, without importing typing on the host
    from typing import Any

if __name__ != "__main__":  # imported by the console/tests; on a host the source precedes
    # NVML's health reading, here before it moved to nvml.py (shipped after this file).
    from console.hostprogs.sampler.nvml import NvmlXids as NvmlXids
    from console.hostprogs.sampler.nvml import decode_nvml_event as decode_nvml_event
    from console.hostprogs.sampler.nvml import nvml_health as nvml_health
    from console.hostprogs.sampler.schema import (
        XID_FIELDS,
        query_health,
        reader_failed,
        reader_thread,
        record,
    )

HEALTH_EVERY_S = 5.0  # NVML health reads (~20 driver calls a GPU)
NVSMI_HEALTH_EVERY_S = 10.0  # one nvidia-smi start each: its cost is the bench's figure
JOURNAL_EVERY_S = 30.0  # journalctl -k (where /dev/kmsg is not readable): a dearer start
ANSWER_WITHIN_S = 10.0  # a GPU read (NVML call, nvidia-smi) slower than this: "not answering"
XIDS_KEPT = 32  # the most recent Xid events a line carries

# "NVRM: Xid (PCI:0000:83:00): 79, pid=1234, GPU has fallen off the bus."
XID_LINE = re.compile(
    r"NVRM: Xid \(PCI:([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-9a-fA-F])?\)"
    r":\s*([0-9]{1,9})(?![0-9])\s*,?\s*(.*)"  # ASCII digits, bounded: int() takes them
)
_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field')
# A field's older name, asked for where the driver refuses the newer one (before R535).
OLDER_NAMES = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}


def parse_xid(message: str, when: float, source: str) -> dict[str, object] | None:
    """An ``NVRM: Xid`` kernel message as an XID_FIELDS record (None: not one)."""
    m = XID_LINE.search(message)
    if m is None:
        return None
    text = m.group(3).strip()
    values = {"t": when, "xid": int(m.group(2)), "pci": m.group(1).lower(), "text": text[:160]}
    values["source"] = source
    return record(XID_FIELDS, values)


class Bounded:
    """Runs a call in a thread of its own and waits for it at most ``bound`` seconds.

    A call that does not return in time is left running (a driver stuck on a lost GPU
    cannot be interrupted) and not started again while it runs: ``since`` says from when.
    """

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.since: float | None = None

    def call(self, fn: Any, bound: float) -> tuple[bool, Any]:
        if self.thread is not None and self.thread.is_alive():
            return False, None
        box: list[tuple[bool, Any]] = []

        def run() -> None:
            try:
                box.append((True, fn()))
            except Exception as exc:
                box.append((False, exc))

        started = time.time()
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        self.thread.join(bound)
        if self.thread.is_alive():
            self.since = self.since or started
            return False, None
        self.since = None
        ok, value = box[0]
        if not ok:
            raise value
        return True, value


def run_bounded(
    cmd: list[str], bound: float, guard: Bounded, env: dict[str, str] | None = None
) -> tuple[int | None, str]:
    """``cmd``'s exit status and output (run with ``env``, None: this process's); (None,
    "") when it did not finish within ``bound`` (it is killed, not waited on; while one
    still hangs, none is started)."""
    import subprocess

    if guard.thread is not None and guard.thread.is_alive():
        return None, ""
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            # Not text=True (strict): one line of invalid UTF-8 in journalctl -k raised
            # in the reader thread, which died, and an Xid beside it was never seen.
            encoding="utf-8",
            errors="replace",
            env=env,
            preexec_fn=dies_with_sampler(),
        )
    except OSError as exc:
        return 127, str(exc)
    done, out = guard.call(lambda: _read_capped(proc), bound)
    if not done:
        with contextlib.suppress(OSError):
            proc.kill()
        return None, ""
    return proc.returncode, str(out or "")


# Characters of one command's output a reader keeps; past that the command is killed (a
# flooding nvidia-smi grew the sampler to 0.5-0.8 GB through communicate()).
OUTPUT_LIMIT = 16 << 20


def _read_capped(proc: Any) -> str:
    out = str(proc.stdout.read(OUTPUT_LIMIT))
    if len(out) >= OUTPUT_LIMIT:
        with contextlib.suppress(OSError):
            proc.kill()
    proc.stdout.close()
    proc.wait()
    return out


_PREEXEC: list[object] = []  # dies_with_sampler's function, made once


def dies_with_sampler():  # type: ignore[no-untyped-def]
    """A ``preexec_fn`` that has the child SIGKILLed when the thread of the sampler (or
    supervisor) that started it ends (Linux's PR_SET_PDEATHSIG), however it ends: a hung
    nvidia-smi was left for good when the sampler was killed. None where prctl is not to
    be had. libc is loaded here, in the parent, never in a forked child. Here, not in
    gpus.py: the supervisor ships this file without that one."""
    if not _PREEXEC:
        try:
            import ctypes
            import signal

            prctl = ctypes.CDLL(None, use_errno=True).prctl
            kill = int(signal.SIGKILL)

            def preexec() -> None:
                prctl(1, kill, 0, 0, 0)  # PR_SET_PDEATHSIG

            _PREEXEC.append(preexec)
        except (ImportError, OSError, AttributeError):
            _PREEXEC.append(None)
    return _PREEXEC[0]


class NvsmiHealth:
    """The health fields through one ``nvidia-smi --query-gpu`` every ``every`` seconds,
    in a thread of its own (no sample line waits for it). Fields this driver does not
    know are dropped (nvidia-smi refuses a whole query for one unknown field). ``env``:
    the environment nvidia-smi runs with (its PATH finds it); ``extra``: fields asked for
    after the health fields (a supervisor's drain asks for ``uuid``)."""

    def __init__(
        self,
        every: float = NVSMI_HEALTH_EVERY_S,
        bound: float = ANSWER_WITHIN_S,
        env: dict[str, str] | None = None,
        extra: tuple[str, ...] = (),
    ):
        self.every, self.bound, self.env = every, bound, env
        self.fields = list(query_health()) + list(extra)
        self.lock = threading.Lock()
        self.reading: tuple[float, list[str], list[str]] | None = None
        self.error: str | None = None
        self.error_since: float | None = None
        self.guard = Bounded()
        self._stop = threading.Event()
        self.first = threading.Event()  # set once the first query answered or timed out
        reader_thread("nvidia-smi health query", self._loop)

    def _loop(self) -> None:
        try:
            while True:
                self.read_once()
                self.first.set()
                if self._stop.wait(self.every):
                    return
        finally:
            self.first.set()  # a reader that died: nobody waits for its first answer

    def read_once(self) -> None:
        for _ in range(len(self.fields)):
            cmd = ["nvidia-smi", "--query-gpu=" + ",".join(self.fields)]
            started = time.time()
            status, out = run_bounded(
                [*cmd, "--format=csv,noheader,nounits"], self.bound, self.guard, self.env
            )
            with self.lock:
                if status is None:
                    self.error_since = self.error_since or self.guard.since or started
                    self.error = f"nvidia-smi not answering (no reply within {self.bound:g} s)"
                    return
                bad = _INVALID_FIELD.search(out)
                if status != 0 and bad and bad.group(1) in self.fields[2:]:
                    name = bad.group(1)
                    older = OLDER_NAMES.get(name)
                    if older is not None and older not in self.fields:
                        self.fields[self.fields.index(name)] = older
                    else:
                        self.fields.remove(name)
                    continue
                self.error_since = None
                if status != 0:
                    self.error = " ".join(out.split())[:200] or f"nvidia-smi exited {status}"
                    return
                self.error = None
                rows = [ln.strip() for ln in out.splitlines() if ln.strip()]
                self.reading = (time.time(), list(self.fields), rows)
                return

    def latest(self) -> tuple[tuple[float, list[str], list[str]] | None, str | None, float | None]:
        with self.lock:
            return self.reading, self.error, self.error_since

    def stop(self) -> None:
        self._stop.set()


class KernelXids:
    """Xid lines from the kernel log: ``/dev/kmsg`` read without blocking (the whole ring
    buffer at start, then what is new), else ``journalctl -k`` every ``every`` seconds
    in a thread of its own (from ``since``, epoch seconds, when given). ``error`` says why
    neither can be read (dmesg_restrict ...). A read of /dev/kmsg is one record; a file
    in its format (a saved copy, a test's) gives several lines a read: each is parsed."""

    def __init__(
        self, every: float = JOURNAL_EVERY_S, kmsg: str = "/dev/kmsg", since: float = 0.0
    ) -> None:
        self.events: list[dict[str, object]] = []
        self.first = threading.Event()  # set once the log was first read (or cannot be)
        self.source: str | None = None
        self.error: str | None = None
        self.fd: int | None = None
        self.lock = threading.Lock()
        # kmsg stamps records in microseconds of CLOCK_MONOTONIC.
        self.boot = time.time() - time.monotonic()
        try:
            self.fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
            self.source = "kmsg"
            self.first.set()  # read at each poll, without waiting
        except OSError as exc:
            self.error = f"{kmsg} not readable ({exc.strerror or exc})"
            import shutil

            if shutil.which("journalctl"):
                self.source = "journalctl"
                self.every = every
                self.since = since
                self.guard = Bounded()
                reader_thread("journalctl -k", self._journal_loop)
            else:
                self.first.set()

    def _add(self, found: dict[str, object] | None) -> None:
        if found is not None and found not in self.events:
            self.events.append(found)
            del self.events[:-XIDS_KEPT]

    def poll(self) -> list[dict[str, object]]:
        """The Xid events seen so far (reading what the kernel log has new)."""
        if self.fd is not None:
            try:
                self._read_kmsg(self.fd)
            except Exception as exc:  # a reader bug must not end the sampler's loop
                reader_failed("/dev/kmsg", exc)
                self.fd = None
        with self.lock:
            return list(self.events)

    def _read_kmsg(self, fd: int) -> None:
        for _ in range(100000):
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:  # records overwritten before read: go on
                continue
            except OSError as exc:
                self.error, self.source, self.fd = f"/dev/kmsg: {exc}", None, None
                break
            if not chunk:
                break
            if b"NVRM: Xid" not in chunk:
                continue
            for line in chunk.decode("utf-8", "replace").splitlines():
                head, _, message = line.partition(";")  # " KEY=value" lines: no Xid
                if "NVRM: Xid" not in message:
                    continue
                parts = head.split(",")
                stamp = parts[2] if len(parts) > 2 else ""
                usec = int(stamp) if stamp.isascii() and stamp.isdigit() else 0
                with self.lock:
                    self._add(parse_xid(message, self.boot + usec / 1e6, "kmsg"))

    def _journal_loop(self) -> None:
        try:
            while True:
                self._journal_once()
                self.first.set()
                time.sleep(self.every)
        finally:
            self.first.set()

    def _journal_once(self) -> None:
        cmd = ["journalctl", "-k", "-q", "--no-pager", "-o", "short-unix"]
        if self.since:
            cmd += ["--since", f"@{int(self.since)}"]
        status, out = run_bounded(cmd, ANSWER_WITHIN_S, self.guard)
        with self.lock:
            if status != 0:
                self.error = "journalctl -k: " + (" ".join(out.split())[:160] or "no answer")
                return
            for line in out.splitlines():
                if "NVRM: Xid" not in line:
                    continue
                stamp = line.split(" ", 1)[0]
                try:
                    when = float(stamp)
                except ValueError:
                    continue
                self._add(parse_xid(line, when, "journalctl"))
                self.since = max(self.since, when)
            self.error = None
