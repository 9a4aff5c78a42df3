"""The job's ``sitecustomize``: lets the supervisor ask any Python process of the job for
the stack of every thread, even when its main thread is stuck inside C (a collective).

Uploaded as ``<job dir>/python/sitecustomize.py``; each rank's wrapper puts that folder
first on PYTHONPATH (keeping the user's), so every Python the job starts (torchrun, its
workers, mpirun's ranks, a user's script) imports it at start-up. It registers
``faulthandler`` on SIGUSR2 (``hang_inspect.HANG_SIGNAL``) writing to
``<job dir>/hang/<DISTCONSOLE_PROCESS>.<pid>.stacks``; the file's existence tells the
capture that the process answers that signal (a process without it would die of it).
faulthandler's handler is C code that needs neither the GIL nor the main thread.

It also copies torchrun's ``TORCHELASTIC_RESTART_COUNT`` (a worker group restarted by
``--max-restarts``) into ``DISTCONSOLE_RESTART_COUNT``, which every other process of a
job gets from its wrapper, and gives the flight recorder's buffer size its old name
where the torch this Python would import predates ``TORCH_FR_BUFFER_SIZE``. Then it
imports the sitecustomize it shadows, if any (Debian's, a virtualenv's), so the user's
start-up stays as it was. Standard library only, Python >= 3.7, and it never raises: a
job must not fail because its hang hook could not be set up.
"""

import contextlib
import os
import sys


def _distconsole_hang_hook() -> None:
    import faulthandler
    import signal

    job_dir = os.environ.get("DISTCONSOLE_JOB_DIR")
    name = os.environ.get("DISTCONSOLE_PROCESS")
    if not job_dir or not name or not hasattr(signal, "SIGUSR2"):
        return
    folder = os.path.join(os.path.expanduser(job_dir), "hang")
    files = []

    def register() -> None:
        path = os.path.join(folder, f"{name}.{os.getpid()}.stacks")
        handle = open(path, "a")  # noqa: SIM115 - faulthandler keeps writing to it
        files.append(handle)  # faulthandler holds the fd, not the object: keep it open
        previous = signal.getsignal(signal.SIGUSR2)
        # chain=True calls the handler that was there before; with the default action
        # (terminate) that would kill the process right after its dump.
        chain = previous not in (signal.SIG_DFL, signal.SIG_IGN, None)
        faulthandler.register(signal.SIGUSR2, file=handle, all_threads=True, chain=chain)

    os.makedirs(folder, exist_ok=True)
    register()
    if hasattr(os, "register_at_fork"):
        # A forked child (a DataLoader worker) inherits the handler but writes into the
        # parent's file: give it a file of its own.
        os.register_at_fork(after_in_child=_safe(register))


def _safe(action):  # type: ignore[no-untyped-def]
    def run() -> None:
        with contextlib.suppress(Exception):
            action()

    return run


def _chain_next_sitecustomize() -> None:
    """Import the ``sitecustomize`` this file hides (the next one on sys.path)."""
    import importlib

    here = os.path.dirname(os.path.abspath(__file__))
    me = sys.modules.get("sitecustomize")
    saved = list(sys.path)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        del sys.modules["sitecustomize"]
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        if me is not None and "sitecustomize" not in sys.modules:
            sys.modules["sitecustomize"] = me


def _distconsole_restart_count() -> None:
    """torchrun's workers: the restart's number under distconsole's name too."""
    count = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if count is not None:
        os.environ["DISTCONSOLE_RESTART_COUNT"] = count


def _distconsole_flight_recorder_name() -> None:
    """torch 2.8 renamed TORCH_NCCL_TRACE_BUFFER_SIZE to TORCH_FR_BUFFER_SIZE and warns on
    every rank about the old name; the plan sets the new one, which an older torch
    ignores. torch's version is read from its version.py without importing torch (this
    runs in every Python of the job, most of which never import it)."""
    if "TORCH_FR_BUFFER_SIZE" not in os.environ or "TORCH_NCCL_TRACE_BUFFER_SIZE" in os.environ:
        return
    import importlib.util
    import re

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, "version.py")
        if os.path.exists(path):
            with open(path, encoding="utf-8", errors="replace") as handle:
                found = re.search(r"__version__\s*=\s*['\"](\d+)\.(\d+)", handle.read())
            if found and (int(found[1]), int(found[2])) < (2, 8):
                os.environ["TORCH_NCCL_TRACE_BUFFER_SIZE"] = os.environ.pop("TORCH_FR_BUFFER_SIZE")
            return


_safe(_distconsole_hang_hook)()
_safe(_distconsole_flight_recorder_name)()
_safe(_distconsole_restart_count)()
_safe(_chain_next_sitecustomize)()
