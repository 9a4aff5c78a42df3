"""Why a slow rank is slow, in words a user acts on: ``rank_cause(pid, gpu_index)``.

Read on the rank's host when the leader has scored a rank slow (issue 32, item 3): its
GPU's clocks throttle reasons and PCIe link, another job's or user's process on its GPU
(``cause_gpu.py``), its cgroup's CPU quota throttling, the host's load against its cores
and swapping (``cause_host.py``). Counters are read twice, ``sample_s`` apart, so a rate
is what is judged, not a total since boot. Each reading that fails makes that reason
unknown (listed by :func:`rank_causes`), never "ok"; nothing found is "unknown".

A host program part: standard library and console.hostprogs only, Python 3.7+.
"""

from __future__ import annotations

import os
import threading
import time

if __name__ != "__main__":  # imported by the console/tests; on a host the source precedes
    from console.hostprogs.pace.cause_gpu import (
        CAUSE_QUERY_APPS,
        CAUSE_QUERY_GPU,
        cause_csv_rows,
        cause_foreign_pids,
        cause_gpu_row,
        cause_gpu_words,
        cause_shared_words,
    )
    from console.hostprogs.pace.cause_host import (
        cause_cgroup_dirs,
        cause_cpu_mounts,
        cause_load_words,
        cause_parse_keyed,
        cause_quota_words,
        cause_swap_words,
        cause_throttle_words,
        cause_throttled_fraction,
    )
    from console.hostprogs.sampler.health import (
        _INVALID_FIELD,
        OLDER_NAMES,
        Bounded,
        run_bounded,
    )

CAUSE_JOB_VAR = "DISTCONSOLE_JOB_ID"  # the runner sets it in every rank's environment
CAUSE_NVSMI_BOUND_S = 10.0  # an nvidia-smi slower than this leaves the GPU reasons unknown
_CAUSE_GUARD: list[object] = []  # one Bounded for every query: a hung nvidia-smi is not re-run
# The supervisor asks for every rank of its host in threads of their own: one answer of
# nvidia-smi serves them all for this long (each start costs a tenth of a CPU second or
# more), and the lock makes the others wait for it instead of finding it "not answering".
CAUSE_NVSMI_FRESH_S = 5.0
_CAUSE_ANSWERS: dict[tuple[str, ...], tuple[float, list[dict[str, str]] | None, str]] = {}
_CAUSE_LOCK = threading.Lock()


def _cause_read(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return None


def _cause_guard() -> Bounded:
    if not _CAUSE_GUARD:
        _CAUSE_GUARD.append(Bounded())
    return _CAUSE_GUARD[0]  # type: ignore[return-value]


def cause_nvsmi_query(
    kind: str, fields: tuple[str, ...]
) -> tuple[list[dict[str, str]] | None, str]:
    """One bounded ``nvidia-smi --query-KIND``: (rows, "") or (None, why not), shared by
    the calls of the next CAUSE_NVSMI_FRESH_S (for the same PATH: the same nvidia-smi)."""
    key = (kind, os.environ.get("PATH", ""), *fields)
    with _CAUSE_LOCK:
        kept = _CAUSE_ANSWERS.get(key)
        if kept is not None and time.time() - kept[0] < CAUSE_NVSMI_FRESH_S:
            return kept[1], kept[2]
        rows, why = _cause_nvsmi_ask(kind, fields)
        _CAUSE_ANSWERS[key] = (time.time(), rows, why)
        return rows, why


def _cause_nvsmi_ask(kind: str, fields: tuple[str, ...]) -> tuple[list[dict[str, str]] | None, str]:
    """A field this driver refuses is asked again under its older name, or without it."""
    asked = list(fields)
    for _ in range(len(fields)):
        cmd = ["nvidia-smi", f"--query-{kind}=" + ",".join(asked), "--format=csv,noheader,nounits"]
        status, out = run_bounded(cmd, CAUSE_NVSMI_BOUND_S, _cause_guard())
        if status is None:
            return None, f"nvidia-smi not answering within {CAUSE_NVSMI_BOUND_S:g} s"
        bad = _INVALID_FIELD.search(out)
        if status != 0 and bad and bad.group(1) in asked[1:]:
            name = bad.group(1)
            older = OLDER_NAMES.get(name)
            asked[asked.index(name)] = older if older and older not in asked else ""
            asked = [f for f in asked if f]
            continue
        if status != 0:
            return None, " ".join(out.split())[:200] or f"nvidia-smi exited {status}"
        return cause_csv_rows(out, asked), ""
    return None, "nvidia-smi refused every field"


def _cause_parent(pid: int) -> int | None:
    text = _cause_read(f"/proc/{pid}/stat")
    try:
        return int(text.rsplit(")", 1)[1].split()[1]) if text else None
    except (IndexError, ValueError):
        return None


def cause_job_id(pid: int, depth: int = 32) -> str | None:
    """The distconsole job a process belongs to (its own or the nearest ancestor's
    environment); None when none says, or it is not ours to read."""
    current: int | None = pid
    for _ in range(depth):
        if current is None or current <= 1:
            return None
        try:
            with open(f"/proc/{current}/environ", "rb") as handle:
                env = handle.read(1 << 20).split(b"\0")
        except OSError:
            return None
        for item in env:
            if item.startswith(CAUSE_JOB_VAR.encode() + b"="):
                return item.split(b"=", 1)[1].decode("utf-8", "replace") or None
        current = _cause_parent(current)
    return None


def cause_user_of(pid: int) -> str | None:
    import pwd

    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _cause_is_ours(rank_pid: int):  # type: ignore[no-untyped-def]
    """Whether a GPU process belongs to the rank's job: the rank itself, the same job id,
    or (no job id on either) the same session."""
    job = cause_job_id(rank_pid)
    user = cause_user_of(rank_pid)
    try:
        session: int | None = os.getsid(rank_pid)
    except OSError:
        session = None

    def ours(pid: int) -> bool:
        if pid == rank_pid:
            return True
        if job is not None:
            return cause_job_id(pid) == job
        if user is not None and cause_user_of(pid) != user:
            return False
        try:
            return session is not None and os.getsid(pid) == session
        except OSError:
            return False

    return ours


def _cause_gpu_causes(pid: int, index: int, found: list[str], unread: list[str]) -> None:
    rows, why = cause_nvsmi_query("gpu", CAUSE_QUERY_GPU)
    row = cause_gpu_row(rows, index) if rows is not None else None
    if row is None:
        unread.append(f"GPU {index} ({why or 'not in nvidia-smi answer'})")
        return
    words, told = cause_gpu_words(row)
    found.extend(words)
    if not told:
        unread.append(f"GPU {index} clocks (not reported)")
    apps, why = cause_nvsmi_query("compute-apps", CAUSE_QUERY_APPS)
    if apps is None:
        unread.append(f"GPU {index} processes ({why})")
        return
    others = cause_foreign_pids(apps, row, _cause_is_ours(pid))
    if others:
        found.append(cause_shared_words(index, others, {p: cause_user_of(p) for p in others}))


def _cause_counters(dirs: list[str]) -> tuple[dict[str, dict[str, int]], dict[str, int] | None]:
    stats = {}
    for d in dirs:
        text = _cause_read(d + "/cpu.stat")
        if text is not None:
            stats[d] = cause_parse_keyed(text)
    vmstat = _cause_read("/proc/vmstat")
    return stats, cause_parse_keyed(vmstat) if vmstat is not None else None


def _cause_quota(where: str) -> str:
    cpu_max = _cause_read(where + "/cpu.max")
    if cpu_max is not None:
        return cause_quota_words(cpu_max=cpu_max)
    return cause_quota_words(
        quota_us=_cause_read(where + "/cpu.cfs_quota_us"),
        period_us=_cause_read(where + "/cpu.cfs_period_us"),
    )


def rank_causes(
    pid: int, gpu_index: int | None, sample_s: float = 1.0
) -> tuple[list[str], list[str]]:
    """(causes found, in words; what could not be read, in words) for the rank ``pid``
    on GPU ``gpu_index`` (nvidia-smi's index; None: no GPU). Takes about ``sample_s``."""
    found: list[str] = []
    unread: list[str] = []
    proc_cgroup = _cause_read(f"/proc/{pid}/cgroup")
    mountinfo = _cause_read(f"/proc/{pid}/mountinfo") or _cause_read("/proc/self/mountinfo")
    dirs = cause_cgroup_dirs(proc_cgroup, cause_cpu_mounts(mountinfo or "")) if proc_cgroup else []
    if not dirs:
        unread.append(f"cgroup CPU quota (no cpu controller in /proc/{pid}/cgroup)")
    started = time.time()
    before = _cause_counters(dirs)
    if gpu_index is not None:
        _cause_gpu_causes(pid, gpu_index, found, unread)
    time.sleep(max(0.0, sample_s - (time.time() - started)))
    after = _cause_counters(dirs)
    elapsed = time.time() - started
    worst: tuple[float, str] | None = None
    for d, stat in after[0].items():
        if d not in before[0]:
            continue  # read once only: no rate (its counters since boot are no cause)
        fraction = cause_throttled_fraction(before[0][d], stat, elapsed)
        if fraction is not None and (worst is None or fraction > worst[0]):
            worst = (fraction, d)
    if worst is not None:
        words = cause_throttle_words(worst[0], worst[1], _cause_quota(worst[1]))
        if words:
            found.append(words)
    elif dirs:
        unread.append("cgroup CPU quota (cpu.stat not readable)")
    loadavg = _cause_read("/proc/loadavg")
    words = cause_load_words(loadavg, os.cpu_count()) if loadavg is not None else None
    if loadavg is None:
        unread.append("host load (/proc/loadavg)")
    elif words:
        found.append(words)
    if before[1] is None or after[1] is None:
        unread.append("swapping (/proc/vmstat)")
    else:
        words = cause_swap_words(before[1], after[1], elapsed)
        if words:
            found.append(words)
    return found, unread


def rank_cause(pid: int, gpu_index: int | None, sample_s: float = 1.0) -> str:
    """The causes found for a slow rank, "; "-joined, or "unknown" when nothing shows."""
    found, _unread = rank_causes(pid, gpu_index, sample_s)
    return "; ".join(found) or "unknown"
