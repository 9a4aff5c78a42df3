"""What a rank's host shows that would slow it: the rank's cgroup throttled by its CPU
quota, the host's CPU saturated, memory swapping.

Pure functions over the kernel's text (``/proc/PID/cgroup``, ``/proc/self/mountinfo``,
``cpu.stat`` of cgroup v1's ``cpu`` controller and of cgroup v2, ``/proc/loadavg``,
``/proc/vmstat``), so each is tested on captured text; two readings of a counter a
sampling interval apart give a rate. The reading is :mod:`causes`'s.

A host program part: standard library only, Python 3.7+.
"""

from __future__ import annotations

import os

# Throttled less of the time than this is a quota that bites now and then, not a cause.
CAUSE_THROTTLED_FRACTION = 0.10
# A host whose 1-minute load is above this many times its cores is saturated.
CAUSE_LOAD_PER_CORE = 1.5
CAUSE_SWAP_PAGES_S = 1.0  # pages swapped in+out per second that count as swapping


def cause_parse_keyed(text: str) -> dict[str, int]:
    """``cpu.stat``/``/proc/vmstat`` lines "name value" as a dict (odd lines skipped)."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def cause_cpu_mounts(mountinfo: str) -> dict[str, str]:
    """Where the cpu controllers are mounted: {"v1": dir, "v2": dir} (each when present),
    from ``/proc/PID/mountinfo`` (fields: ... mount-point ... - fstype source options)."""
    out: dict[str, str] = {}
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        point = fields[4].replace("\\040", " ")
        if tail[0] == "cgroup2":
            out.setdefault("v2", point)
        elif tail[0] == "cgroup" and "cpu" in tail[2].split(","):
            out.setdefault("v1", point)
    return out


def cause_cgroup_dirs(proc_cgroup: str, mounts: dict[str, str]) -> list[str]:
    """The cgroup directories whose ``cpu.stat`` may show the rank throttled, its own
    first, then each parent (a quota set on a parent throttles the children too)."""
    found = []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers = parts[1].split(",")
        if parts[0] == "0" and parts[1] == "" and "v2" in mounts:
            root = mounts["v2"]
        elif "cpu" in controllers and "v1" in mounts:
            root = mounts["v1"]
        else:
            continue
        path = parts[2].strip()
        while True:
            found.append(os.path.normpath(root + "/" + path.lstrip("/")))
            if path in ("/", ""):
                break
            path = os.path.dirname(path)
    return list(dict.fromkeys(found))  # v1 and v2 both mounted: each dir once


def cause_throttled_fraction(
    before: dict[str, int], after: dict[str, int], elapsed: float
) -> float | None:
    """The share of ``elapsed`` the cgroup spent throttled (0-1) between two ``cpu.stat``
    readings; None when they do not tell (no throttling counters)."""
    if elapsed <= 0:
        return None
    for key, scale in (("throttled_usec", 1e-6), ("throttled_time", 1e-9)):
        if key in before and key in after:
            # Summed over the CPUs the cgroup ran on: a multi-threaded rank can exceed 1.
            return max(0.0, min(1.0, (after[key] - before[key]) * scale / elapsed))
    periods = after.get("nr_periods", 0) - before.get("nr_periods", 0)
    if "nr_throttled" in after and periods > 0:
        return max(0.0, min(1.0, (after["nr_throttled"] - before.get("nr_throttled", 0)) / periods))
    return None


def cause_quota_words(
    cpu_max: str | None = None, quota_us: str | None = None, period_us: str | None = None
) -> str:
    """ ", quota 0.25 CPU" from v2's ``cpu.max`` ("25000 100000") or v1's
    ``cpu.cfs_quota_us``/``cpu.cfs_period_us``; "" when unlimited or unread."""
    try:
        if cpu_max is not None:
            quota_text, _, period_text = cpu_max.strip().partition(" ")
            if quota_text == "max":
                return ""
            quota, period = float(quota_text), float(period_text or 100000)
        elif quota_us is not None and period_us is not None:
            quota, period = float(quota_us), float(period_us)
        else:
            return ""
    except ValueError:
        return ""
    return f", quota {quota / period:.2g} CPU" if quota > 0 and period > 0 else ""


def cause_throttle_words(fraction: float, where: str, quota: str = "") -> str | None:
    """ "CPU: cgroup quota throttled 74% of the time (/sys/fs/cgroup/cpu/x, quota 0.25
    CPU)" when the fraction counts as a cause."""
    if fraction < CAUSE_THROTTLED_FRACTION:
        return None
    return f"CPU: cgroup quota throttled {fraction * 100:.0f}% of the time ({where}{quota})"


def cause_load_words(loadavg: str, cores: int | None) -> str | None:
    """ "CPU: host saturated, load 25.6 on 2 cores" from ``/proc/loadavg``'s text."""
    try:
        load = float(loadavg.split()[0])
    except (ValueError, IndexError):
        return None
    if not cores or load <= cores * CAUSE_LOAD_PER_CORE:
        return None
    return f"CPU: host saturated, load {load:.1f} on {cores} core{'s' if cores != 1 else ''}"


def cause_swap_words(before: dict[str, int], after: dict[str, int], elapsed: float) -> str | None:
    """ "memory: swapping 120 pages/s in, 40 out" from two ``/proc/vmstat`` readings."""
    if elapsed <= 0 or not all(k in before and k in after for k in ("pswpin", "pswpout")):
        return None
    rate_in = (after["pswpin"] - before["pswpin"]) / elapsed
    rate_out = (after["pswpout"] - before["pswpout"]) / elapsed
    if rate_in + rate_out < CAUSE_SWAP_PAGES_S:
        return None
    return f"memory: swapping {rate_in:.0f} pages/s in, {rate_out:.0f} out"
