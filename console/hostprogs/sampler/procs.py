"""The sampler's child processes: nvidia-smi runs bounded in time and bytes, and none
outlives the sampler.

Part of the sampler program (see ``program.py``): runs on the host, standard library
only.
"""

from __future__ import annotations

import time

if __name__ != "__main__":  # imported by the console/tests; on a host the source precedes
    from console.hostprogs.sampler.health import dies_with_sampler

# What the sampler keeps of nvidia-smi's output is bounded: a stand-in writing without
# end grew it to 0.5-0.8 GB (a line that never ended, 100,000s of made-up GPU indices,
# hundreds of MB of compute-apps rows), and every kept row goes to the console too.
MAX_ROW_CHARS = 4096  # a --query-gpu row is ~300 characters
MAX_GPU_ROWS = 64  # GPU indices kept: more than any host has
MAX_ERROR_CHARS = 300
MAX_APPS_BYTES = 1 << 20  # of one nvidia-smi answer (~100 bytes a process, ~300 a GPU)
MAX_APP_ROWS = 1024  # GPU processes kept of one answer (each goes to the console)
_SINCE_TICKS: list[float] = []  # own_children's time, in /proc's clock ticks since boot
_REAPER: list[bool] = []  # [True]: orphaned descendants come back to this process
PR_SET_CHILD_SUBREAPER = 36


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
    return run_all([cmd], timeout, limit)[0]


def run_all(cmds: list[list[str]], timeout: float, limit: int) -> list[tuple[int | None, str]]:
    """:func:`run_capped` for several commands at once (started together, read by one
    selector: a one-shot sample waits for the slowest, not for their sum)."""
    import os
    import selectors
    import subprocess

    procs = [
        subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=dies_with_sampler(),
        )
        for cmd in cmds
    ]
    outs = [bytearray() for _ in procs]
    ended = [False for _ in procs]
    deadline = time.time() + timeout
    with selectors.DefaultSelector() as selector:
        for i, proc in enumerate(procs):
            assert proc.stdout is not None
            selector.register(proc.stdout, selectors.EVENT_READ, i)
        while selector.get_map():
            left = deadline - time.time()
            events = selector.select(left) if left > 0 else []
            if not events:
                break
            for key, _ in events:
                i = key.data
                chunk = os.read(key.fd, 65536)
                outs[i] += chunk
                if not chunk or len(outs[i]) >= limit:
                    ended[i] = not chunk
                    selector.unregister(key.fileobj)
    return [_finish(p, out, done, deadline, limit) for p, out, done in zip(procs, outs, ended)]  # noqa: B905 (hosts may run Python < 3.10)


def _finish(proc, out, ended, deadline, limit):  # type: ignore[no-untyped-def]
    import subprocess

    assert proc.stdout is not None
    proc.stdout.close()
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
    _become_subreaper()
    atexit.register(end_children)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _exit_on_signal)


def _become_subreaper() -> None:
    """Orphaned descendants come back to this process (Linux's PR_SET_CHILD_SUBREAPER):
    with no child left at exit, nothing it started can be running, and end_children
    need not read every process of the host to know it."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
        if prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
            _REAPER.append(True)
    except (ImportError, OSError, AttributeError):
        return


def _exit_on_signal(signum, frame):  # type: ignore[no-untyped-def]
    import sys

    sys.exit(128 + signum)  # through atexit: end_children runs


def has_children() -> bool:
    """Whether a process this one started (or, as a subreaper, inherited) still runs;
    the ones that ended are reaped on the way."""
    import os

    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        except OSError:
            return True
        if pid == 0:
            return True


def end_children() -> None:
    """SIGKILL every other process of the group this sampler leads (read from /proc).
    As a subreaper with no child left (a one-shot that reaped its nvidia-smi runs), there
    is none: the scan of /proc (~700 processes, 20 ms on a host running 64 sshd hosts'
    sessions) is skipped."""
    import os
    import signal

    if _REAPER and not has_children():
        return
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
