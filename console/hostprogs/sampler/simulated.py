"""Simulated GPUs for demo hosts (inventory ``gpu_source: simulated`` only).

A machine without NVIDIA GPUs would show empty panels in the demo. These GPUs are
labelled simulated in their name and in every sample. Their processes are NOT made
up: they are the host's real processes that carry ``DISTCONSOLE_JOB_ID`` (the runner
sets it on everything it launches), placed on GPU ``LOCAL_RANK % N``; a GPU with such
a process gets busy, the others idle.

This module runs on the host as part of the sampler program: standard library only,
no imports from ``console`` there. ``job_of`` is shared with the real-GPU path. Records
are built with the sample schema's :func:`record`.
"""

from __future__ import annotations

import math
import os
import time

# hashlib (OpenSSL's library) and random are imported where used: this file is part of
# every sampler, and only demo hosts simulate GPUs.

if __name__ != "__main__":  # imported by the console/tests; on a host the source precedes
    from console.hostprogs.sampler.schema import GPU_FIELDS, GPU_PROCESSES, PROCESS_FIELDS, record

JOB_VAR = "DISTCONSOLE_JOB_ID"
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
# Demo hosts share one machine: a process belongs to the demo host (and demo cluster)
# whose session started it, which these variables name.
DEMO_VARS = ("DISTCONSOLE_DEMO_HOST", "DISTCONSOLE_DEMO_CLUSTER")
SIMULATED_MODEL = "Simulated A100 80GB (simulated)"
# An inventory tag naming a board picks the simulated model, so a host tagged h100
# does not read as an A100 (first match wins; no such tag: the A100).
MODEL_BY_TAG = (("h100", "Simulated H100 80GB (simulated)"), ("a100", SIMULATED_MODEL))
# Every reader (the console's stream, `distconsole gpus`' one-shot line) derives a GPU's
# figures from the clock and its processes' start times, never from its own history, so
# two samplers of one host agree: memory grows with a rank's age, the board warms up
# over WARM_S from its idle temperature.
WARM_S = 20.0
SIMULATED_MEMORY_MIB = 81920.0
SIMULATED_POWER_LIMIT_W = 400.0


def read_environ(pid: int, needs: str | None = None) -> dict[str, str] | None:
    """A process's initial environment, or None when it is gone or not ours to read, or
    (with ``needs``) does not set that variable: most processes of a host are not a
    job's, and parsing each one's environment was most of a scan's cost."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    if (
        needs is not None
        and not raw.startswith(needs.encode() + b"=")
        and (b"\0" + needs.encode() + b"=" not in raw)
    ):
        return None
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def parent_pid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def model_for_tags(tags: list[str] | tuple[str, ...]) -> str:
    lowered = {t.lower() for t in tags}
    return next((model for tag, model in MODEL_BY_TAG if tag in lowered), SIMULATED_MODEL)


def _boot_time() -> float | None:
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def started_at(pid: int, boot: float | None) -> float | None:
    """When the process started (seconds since the epoch): the same answer for every
    sampler that asks, unlike the time one sampler first saw it."""
    if boot is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[-1].split()
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _int(env: dict[str, str], names: tuple[str, ...]) -> int | None:
    for name in names:
        value = env.get(name)
        if value is not None and value.strip().lstrip("-").isdigit():
            return int(value)
    return None


def job_of(pid: int, max_depth: int = 32) -> dict[str, object] | None:
    """``{"job", "rank", "local_rank"}`` for a process of a distconsole job, else None.

    The process's own environment first; else the nearest ancestor that carries the
    job id (a launcher that cleared the environment of its children).
    """
    own = read_environ(pid)
    rank = _int(own, RANK_VARS) if own else None
    local_rank = _int(own, LOCAL_RANK_VARS) if own else None
    current: int | None = pid
    env = own
    for _ in range(max_depth):
        if env is not None and env.get(JOB_VAR):
            if rank is None:
                rank = _int(env, RANK_VARS)
            if local_rank is None:
                local_rank = _int(env, LOCAL_RANK_VARS)
            return {"job": env[JOB_VAR], "rank": rank, "local_rank": local_rank}
        current = parent_pid(current) if current is not None else None
        if current is None or current <= 1:
            return None
        env = read_environ(current)
    return None


class JobProcessScan:
    """The host's processes that belong to distconsole jobs, re-scanned cheaply.

    A process's initial environment never changes, so each pid is read once and
    remembered until it disappears.
    """

    def __init__(self) -> None:
        self._known: dict[int, dict[str, object] | None] = {}
        self.first_seen: dict[int, float] = {}
        self._mine = {k: os.environ[k] for k in DEMO_VARS if k in os.environ}
        self._boot = _boot_time()

    def scan(self) -> dict[int, dict[str, object]]:
        try:
            pids = {int(n) for n in os.listdir("/proc") if n.isdigit()}
        except OSError:
            return {}
        for gone in set(self._known) - pids:
            del self._known[gone]
            self.first_seen.pop(gone, None)
        for pid in pids - set(self._known):
            env = read_environ(pid, JOB_VAR)
            foreign = any(env.get(k) != v for k, v in self._mine.items()) if env else True
            if env is None or not env.get(JOB_VAR) or foreign:
                self._known[pid] = None
                continue
            self.first_seen[pid] = started_at(pid, self._boot) or time.time()
            self._known[pid] = {
                "job": env[JOB_VAR],
                "rank": _int(env, RANK_VARS),
                "local_rank": _int(env, LOCAL_RANK_VARS),
            }
        return {pid: info for pid, info in self._known.items() if info is not None}


def _uuid(seed: str, index: int) -> str:
    import hashlib

    h = hashlib.sha1(f"{seed}/{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class SimulatedGpus:
    """N simulated GPUs whose load follows the host's real job processes."""

    def __init__(self, seed: str, count: int, model: str = SIMULATED_MODEL) -> None:
        self.count = max(1, count)
        self.seed = seed
        self.model = model
        import random

        rng = random.Random(seed)
        self._idle_temps = [32.0 + rng.random() * 4 for _ in range(self.count)]
        self._scan = JobProcessScan()

    def _noise(self, index: int, now: float, what: str, spread: float) -> float:
        """-spread..spread, the same for every sampler of this host in the same second."""
        import random

        return random.Random(f"{self.seed}/{index}/{what}/{int(now)}").uniform(-spread, spread)

    def _placed(self) -> dict[int, list[tuple[int, dict[str, object]]]]:
        procs = self._scan.scan()
        ranked = {p: i for p, i in procs.items() if i.get("local_rank") is not None}
        if not ranked:
            # Launchers without per-rank variables: show each job's top process on GPU 0.
            ranked = {
                p: dict(i, local_rank=0) for p, i in procs.items() if parent_pid(p) not in procs
            }
        placed: dict[int, list[tuple[int, dict[str, object]]]] = {}
        for pid, info in sorted(ranked.items()):
            local = info.get("local_rank")
            gpu = (local if isinstance(local, int) else 0) % self.count
            placed.setdefault(gpu, []).append((pid, info))
        return placed

    def sample(self, now: float | None = None) -> tuple[list[dict[str, object]], list[int]]:
        """GPU dicts in the sampler's JSON shape, and the pids placed on them."""
        now = time.time() if now is None else now
        placed = self._placed()
        gpus = []
        pids = []
        for i in range(self.count):
            procs = placed.get(i, [])
            busy = bool(procs)
            wave = math.sin(now / 7.0 + i * 1.3)
            noise = self._noise(i, now, "util", 3.0)
            util = 88 + 8 * wave + noise if busy else abs(noise) * 2 / 3
            util = max(0.0, min(100.0, util))
            idle = self._idle_temps[i]
            if busy:
                busy_for = max(0.0, now - min(self._scan.first_seen.get(p, now) for p, _ in procs))
                warmed = 1.0 - math.exp(-busy_for / WARM_S)
                temperature = idle + (34 + util * 0.42 - idle) * warmed
            else:
                temperature = idle
            used = 0.0
            proc_dicts = []
            for pid, info in procs:
                age = max(0.0, now - self._scan.first_seen.get(pid, now))
                mem = min(SIMULATED_MEMORY_MIB * 0.8 / len(procs), 1500.0 + age * 900.0)
                used += mem
                pids.append(pid)
                proc_dicts.append(
                    record(
                        PROCESS_FIELDS,
                        {
                            "pid": pid,
                            "used_memory_mib": round(mem, 1),
                            "type": "C",
                            "job": info.get("job"),
                            "rank": info.get("rank"),
                            "local_rank": info.get("local_rank"),
                        },
                    )
                )
            power = 55 + util / 100 * (SIMULATED_POWER_LIMIT_W - 80) + self._noise(i, now, "w", 5)
            gpu = record(
                GPU_FIELDS,
                {
                    "index": i,
                    "uuid": _uuid(self.seed, i),
                    "name": self.model,
                    "utilization_gpu": round(util),
                    "utilization_memory": round(util * 0.45) if busy else 0,
                    "memory_used_mib": round(used + 4.0, 1),
                    "memory_total_mib": SIMULATED_MEMORY_MIB,
                    "temperature_c": round(temperature),
                    "power_draw_w": round(power, 2),
                    "power_limit_w": SIMULATED_POWER_LIMIT_W,
                    "fan_percent": None,  # SXM boards have no fan of their own
                    "pstate": "P0" if busy else "P8",
                    "clock_sm_mhz": 1410 if busy else 210,
                    "clock_mem_mhz": 1593,
                    "ecc_corrected": 0,
                    "ecc_uncorrected": 0,
                    "mig_mode": "Disabled",
                },
            )
            gpu[GPU_PROCESSES] = proc_dicts
            gpus.append(gpu)
        return gpus, pids
