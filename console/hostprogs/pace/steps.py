"""How far each worker of a job whose workers do not wait for each other has got, read
from its own log on this host (issue 32: PS/async kinds).

A parameter-server job's workers each push to the ps tasks at their own pace, so a slow
worker holds nobody back and its busy time says nothing; its step rate does. Each worker
process's output files (its stdout, and its stderr where Python's logging writes) are
read from where the last reading stopped, and the last step a line names is kept (the
console's own step patterns, ``console/logs/steps.py``: a unit test keeps the two the same).
A worker is reported from its first step line on, as counters (``wall_s`` since it was
first seen on this host, ``step_wall_s`` when its step last moved, ``stride`` its last
move), so the leader's :class:`PaceBoard` (``score.py``) can judge a rate from sparse
lines: a worker that prints every 100 steps is not slow between two lines.

A part of the supervisor's single source: standard library only, Python >= 3.7, names
prefixed ``pace_``/``Pace``/``PACE_``.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

if __name__ != "__main__":  # imported by the console/tests; on a host the parts precede
    from console.hostprogs.jobctl.common import exit_status, job_pgids

_PACE_SEP = r"[ \t]*[:=#]?[ \t]*"
# The console's DEFAULT_STEP_PATTERNS (console/logs/steps.py), in the same order: the
# first that matches a line gives its step.
PACE_STEP_PATTERNS = (
    r"\d+%\|[^|\n]*\|[ \t]*(?P<step>\d+)/(?P<total>\d+)[ \t]*\[",
    r"\bepoch" + _PACE_SEP + r"\[?(?P<epoch>\d+)(?:/\d+)?\]?[ \t,;|-]*"
    r"(?:global[_ ])?(?:step|iter(?:ation)?|batch)"
    + _PACE_SEP
    + r"\[?(?P<step>\d+)(?:/(?P<total>\d+))?",
    r"\b(?:global[_ ])?step" + _PACE_SEP + r"\[?(?P<step>\d+)(?:[ \t]*/[ \t]*(?P<total>\d+))?",
    r"\biter(?:ation)?" + _PACE_SEP + r"\[?(?P<step>\d+)(?:[ \t]*/[ \t]*(?P<total>\d+))?",
)
_PACE_STEP_RES = [re.compile(p, re.IGNORECASE) for p in PACE_STEP_PATTERNS]
# The roles that take steps. A chief also writes checkpoints and summaries, so its rate
# is not a worker's: it is left out.
PACE_STEP_ROLES = ("worker",)
PACE_READ_MAX = 256 * 1024  # of new output per reading: only its last step matters
PACE_PARTIAL_MAX = 64 * 1024  # an unfinished line kept for the next reading


def pace_last_step(lines: list[str]) -> int | None:
    """The step the newest line that names one names."""
    for line in reversed(lines):
        lowered = line.lower()
        if "step" not in lowered and "iter" not in lowered and "%|" not in lowered:
            continue  # every pattern holds one of these: most lines are passed over here
        for regex in _PACE_STEP_RES:
            found = regex.search(line)
            if found is not None:
                return int(found.group("step"))
    return None


class PaceLogTail:
    """One output file, read from where the last reading stopped (whole lines only)."""

    def __init__(self, path: str) -> None:
        self.path = os.path.expanduser(path)
        self.offset = 0
        self.partial = b""

    def new_lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < self.offset:  # truncated or replaced: read it from the start
                    self.offset, self.partial = 0, b""
                if size - self.offset > PACE_READ_MAX:
                    self.offset, self.partial = size - PACE_READ_MAX, b""
                handle.seek(self.offset)
                data = handle.read(PACE_READ_MAX)
        except OSError:
            return []
        self.offset += len(data)
        data = self.partial + data
        cut = data.rfind(b"\n") + 1
        self.partial = data[cut:][-PACE_PARTIAL_MAX:]
        return data[:cut].decode(errors="replace").splitlines()


def pace_child(pgid: int) -> int:
    """The program the wrapper shell leading ``pgid`` runs (its causes are the program's:
    its cgroup, its GPU), else the shell itself."""
    text = ""
    try:
        with open(f"/proc/{pgid}/task/{pgid}/children", "rb") as handle:
            text = handle.read(4096).decode(errors="replace")
    except OSError:
        pass
    children = [int(w) for w in text.split() if w.isdigit()]
    return min(children) if children else pgid


class PaceStepMeter:
    """This host's step-taking processes of one job, sampled on demand (~1 s)."""

    def __init__(self, job_dir: str, procs: list[dict[str, Any]]) -> None:
        self.job_dir = job_dir
        # name -> {"rank", "task", "tails", "pid", "first", "step", "step_at", "stride"}
        self.state: dict[str, dict[str, Any]] = {}
        for proc in procs:
            role = str(proc.get("role"))
            if role not in PACE_STEP_ROLES or not proc.get("output"):
                continue
            name = str(proc["name"])
            self.state[name] = {
                "rank": int(proc.get("index") or 0),
                "task": f"{role} {int(proc.get('index') or 0)}",
                "tails": [PaceLogTail(str(p)) for p in proc["output"]],
                "pid": None,
                "first": None,
                "step": None,
                "step_at": 0.0,
                "stride": 0,
            }

    def sample(self, now: float | None = None) -> list[dict[str, Any]]:
        """Each running worker's counters, once a step line of it has been seen."""
        now = time.monotonic() if now is None else now
        out = []
        for name, state in sorted(self.state.items()):
            if exit_status(self.job_dir, name) is not None:
                continue  # ended: its rate is no longer anybody's concern
            lines: list[str] = []
            for tail in state["tails"]:
                lines += tail.new_lines()
            self.advance(state, pace_last_step(lines), now)
            if state["first"] is None:
                continue
            if state["pid"] is None or not os.path.exists(f"/proc/{state['pid']}"):
                pgid = job_pgids(self.job_dir, [name]).get(name)
                state["pid"] = pace_child(pgid) if pgid is not None else None
            out.append(
                {
                    "rank": state["rank"],
                    "task": state["task"],
                    "pid": state["pid"] or 0,
                    "local": None,
                    "steps": state["step"],
                    "wall_s": round(now - state["first"], 3),
                    "step_wall_s": round(state["step_at"] - state["first"], 3),
                    "stride": state["stride"],
                }
            )
        return out

    @staticmethod
    def advance(state: dict[str, Any], step: int | None, now: float) -> None:
        if step is None or step == state["step"]:
            return
        if state["first"] is None:
            state["first"] = now
        elif state["step"] is not None and step > state["step"]:
            state["stride"] = step - state["step"]
        else:
            state["stride"] = 0  # it went back (a restart from scratch, a new epoch)
        state["step"], state["step_at"] = step, now
