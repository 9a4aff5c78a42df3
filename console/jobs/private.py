"""Files on this machine that hold a job's environment, secret or logs (the job history,
report bundles): private to their user whatever the umask (directories 700, files 600),
and tightened when found open (written by an older distconsole)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path


def private_dir(path: Path, *, tighten_existing: bool = True) -> Path:
    """``path`` made (700; missing parents as usual), or tightened if open; a folder the
    user named (``--out``, ``DISTCONSOLE_DATA_DIR``: maybe ``.`` or their home) is left
    as it is when it exists (``tighten_existing=False``): what is written in it is 600."""
    existed = path.is_dir()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if tighten_existing or not existed:
        tighten(path)
    return path


def private_file(path: Path) -> Path:
    """``path`` created empty (600) if missing, tightened if open; its folder untouched."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    tighten(path)
    return path


def tighten(path: Path) -> None:
    """Group's and others' bits off ``path`` (not a symlink, owned by this user)."""
    with contextlib.suppress(OSError):
        st = path.lstat()
        if st.st_mode & 0o077 and st.st_uid == os.geteuid() and not stat.S_ISLNK(st.st_mode):
            path.chmod(stat.S_IMODE(st.st_mode) & 0o7700)


def write_private(path: Path, data: bytes | str) -> None:
    """``path`` written (600 from its creation, whatever the umask)."""
    raw = data.encode() if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(raw)
    tighten(path)
