"""A job's ``--env`` and ``--env-file``: values that never need to be typed on a command line.

``--env NAME=VALUE`` sets a value; ``--env NAME`` passes the console's own value of
NAME, as ``docker run -e NAME`` does, so a secret (``HF_TOKEN``) stays out of the
console's argv, which every user of the console's machine reads in ``ps``;
``--env-file FILE`` reads ``NAME=VALUE`` lines (``#`` comments, blank lines, an
``export`` prefix and one pair of quotes around the value as a shell or dotenv file
writes them; a lone ``NAME`` is again the console's value). Files first, then
``--env``: the item typed last wins. On the hosts the values travel on stdin and in
0600 files, never in an argv (``jobs/ssh/remote_ops.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from console.errors import JobSpecError
from console.names import env_name_problem

ENV_FILE_OPTION = "--env-file"
ENV_FILE_MAX = 1 << 20  # bytes: an env file is a handful of lines, not a data set


def _console_value(name: str, environ: Mapping[str, str], where: str) -> str:
    value = environ.get(name)
    if value is None:
        raise JobSpecError(
            "env",
            f"{where}{name} is not set in this console's environment (NAME alone passes the "
            "console's own value; export it first, or give NAME=VALUE)",
        )
    return value


def parse_env(items: Iterable[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``["K=V", "NAME", ...]`` -> dict: ``NAME`` alone is the console's own value;
    a malformed item is a JobSpecError on ``env``."""
    source = os.environ if environ is None else environ
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        problem = env_name_problem(key)
        if problem:
            raise JobSpecError("env", problem + ("" if sep else " (give NAME or NAME=VALUE)"))
        env[key] = value if sep else _console_value(key, source, "")
    return env


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def read_env_file(path: str | Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``NAME=VALUE`` lines of ``path``; every problem names the file and the line."""
    source = os.environ if environ is None else environ
    file = Path(path).expanduser()
    try:
        if file.stat().st_size > ENV_FILE_MAX:
            raise JobSpecError(ENV_FILE_OPTION, f"{path}: larger than 1 MiB; not an env file")
        data = file.read_bytes()
    except OSError as exc:
        raise JobSpecError(ENV_FILE_OPTION, f"{path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[: exc.start].count(b"\n") + 1
        raise JobSpecError(ENV_FILE_OPTION, f"{path}, line {bad}: not UTF-8 text") from None
    env: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        where = f"{path}, line {number}: "
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "\x00" in line:
            raise JobSpecError(ENV_FILE_OPTION, where + "a NUL character")
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        problem = env_name_problem(key)
        if problem:
            raise JobSpecError(ENV_FILE_OPTION, where + problem + " (lines are NAME=VALUE)")
        if not sep:
            try:
                env[key] = _console_value(key, source, "")
            except JobSpecError as exc:
                raise JobSpecError(ENV_FILE_OPTION, where + exc.detail) from None
            continue
        env[key] = _unquoted(value.strip())
    return env


def job_environment(
    items: Iterable[str],
    env_files: Iterable[str | Path] = (),
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The job's ``env``: every ``--env-file`` in order, then every ``--env``."""
    env: dict[str, str] = {}
    for path in env_files:
        env.update(read_env_file(path, environ))
    env.update(parse_env(items, environ))
    return env
