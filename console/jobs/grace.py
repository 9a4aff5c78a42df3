"""How long a stopped job's processes get between SIGTERM and SIGKILL, by default.

Its own module so that ``console.settings`` (imported by every command that closes
connections, ``distconsole gpus`` among them) reads the default without importing the
job runner's machinery (``jobs.control`` and what it pulls in: ~80 ms of start-up).
"""

from __future__ import annotations

DEFAULT_GRACE_S = 10.0
