"""Where the sshd test users can run the GPU STAND-IN (``tests/standin/nvidia-smi``).

This machine has no NVIDIA GPU; the stand-in answers nvidia-smi's query flags from real
captured output in ``tests/data/nvidia-smi``. The test hosts' unprivileged users must
execute it, but a checkout can sit where only root may enter (``mktemp -d`` makes 0700
directories, and so may CI), so the stand-in and the captures it reads are copied, with
the same relative layout, into a world-readable directory once per test process.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent


@functools.cache
def readable_standin_dir() -> Path:
    """A directory holding ``nvidia-smi`` (the stand-in) that every user can run."""
    root = Path(tempfile.mkdtemp(prefix="distconsole-standin-", dir="/tmp"))
    atexit.register(shutil.rmtree, root, True)
    shutil.copytree(TESTS / "standin", root / "standin")
    shutil.copytree(TESTS / "data" / "nvidia-smi", root / "data" / "nvidia-smi")
    for path in (root, *root.rglob("*")):
        executable = path.is_dir() or path.stat().st_mode & 0o100
        path.chmod(0o755 if executable else 0o644)
    return root / "standin"
