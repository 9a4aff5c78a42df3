"""What Slurm says about a job, read from its own outputs: ``squeue --json`` while the
controller knows the job, then the job-completion record (``jobcomp/filetxt``, one
``KEY=VALUE`` line per job), and srun's report of a failed task in the batch output.

Pure functions of text, tested on output captured from a real slurmctld 22.05.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from console.jobs.models import JobState

# Slurm's job states (squeue's job_state, jobcomp's JobState) -> the console's.
STATES: dict[str, JobState] = {
    "PENDING": JobState.STARTING,
    "CONFIGURING": JobState.STARTING,
    "REQUEUED": JobState.STARTING,
    "RUNNING": JobState.RUNNING,
    "COMPLETING": JobState.RUNNING,  # steps are still being killed: not over yet
    "SUSPENDED": JobState.RUNNING,
    "STOPPED": JobState.RUNNING,
    "COMPLETED": JobState.SUCCEEDED,
    "CANCELLED": JobState.STOPPED,
    "PREEMPTED": JobState.STOPPED,
    "FAILED": JobState.FAILED,
    "TIMEOUT": JobState.FAILED,
    "NODE_FAIL": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED,
    "DEADLINE": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED,
}

# srun's line when a task fails: "srun: error: n2: task 1: Exited with exit code 3"
# (several tasks: "tasks 0-1"; a signal: "Killed", "Terminated").
_TASK_ERROR = re.compile(
    r"srun: error: (?P<node>[^:\s]+): tasks? (?P<tasks>[0-9,-]+): (?P<what>.+?)\s*$"
)
_EXIT_CODE = re.compile(r"[Ee]xit(?:ed with exit)? code (\d+)")
_JOBCOMP_FIELD = re.compile(r"(\w+)=(\S*)")


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One job as Slurm reports it."""

    slurm_id: str
    slurm_state: str  # PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
    reason: str = ""  # why it is pending (Resources, Priority, JobHeldUser, ...)
    exit_code: int | None = None
    nodes: str = ""  # the allocation's node list, e.g. n[1-2]

    @property
    def state(self) -> JobState:
        return STATES.get(self.slurm_state, JobState.RUNNING)

    def describe(self) -> str:
        """``slurm 12 PENDING (Resources)``, ``slurm 12 RUNNING on n[1-2]``, ..."""
        text = f"slurm {self.slurm_id} {self.slurm_state}"
        if self.reason and self.reason != "None":
            text += f" ({self.reason})"
        if self.nodes:
            text += f" on {self.nodes}"
        return text


@dataclass(frozen=True, slots=True)
class TaskFailure:
    """One failed task as srun reported it in the batch output."""

    node: str
    tasks: str  # "1", "0-1", "0,2"
    what: str  # "Exited with exit code 3", "Killed", ...

    @property
    def exit_code(self) -> int | None:
        found = _EXIT_CODE.search(self.what)
        return int(found.group(1)) if found else None

    def describe(self) -> str:
        many = "," in self.tasks or "-" in self.tasks
        return f"{self.node} task{'s' if many else ''} {self.tasks}: {self.what}"


def _state_word(value: Any) -> str:
    # 22.05 writes one word; later versions a list of flags, the base state first.
    if isinstance(value, list):
        return str(value[0]) if value else ""
    return str(value or "")


def _exit_code(value: Any) -> int | None:
    if isinstance(value, dict):  # later versions: {"status": [...], "return_code": {...}}
        value = value.get("return_code", value)
        if isinstance(value, dict):
            value = value.get("number")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def from_squeue_json(text: str, slurm_id: str) -> SlurmJob | None:
    """The job from ``squeue --json`` output, or None when squeue does not list it."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    jobs = data.get("jobs") if isinstance(data, dict) else None
    for job in jobs or ():
        if isinstance(job, dict) and str(job.get("job_id")) == slurm_id:
            return SlurmJob(
                slurm_id=slurm_id,
                slurm_state=_state_word(job.get("job_state")),
                reason=str(job.get("state_reason") or ""),
                exit_code=_exit_code(job.get("exit_code")),
                nodes=str(job.get("nodes") or ""),
            )
    return None


def from_jobcomp(text: str, slurm_id: str) -> SlurmJob | None:
    """The job's last line in a jobcomp/filetxt file (``JobId=12 ... JobState=FAILED
    ... ExitCode=1:0``), or None."""
    found = None
    for line in text.splitlines():
        if line.startswith(f"JobId={slurm_id} "):
            found = dict(_JOBCOMP_FIELD.findall(line))
    if found is None:
        return None
    code_text = found.get("ExitCode", "").partition(":")[0]
    return SlurmJob(
        slurm_id=slurm_id,
        slurm_state=found.get("JobState", ""),
        exit_code=int(code_text) if code_text.isdigit() else None,
        nodes=found.get("NodeList", ""),
    )


def task_failures(batch_output: str) -> list[TaskFailure]:
    """srun's reports of failed tasks, in the order written."""
    failures = []
    for line in batch_output.splitlines():
        found = _TASK_ERROR.search(line)
        if found:
            failures.append(TaskFailure(found["node"], found["tasks"], found["what"]))
    return failures


def submitted_id(sbatch_output: str) -> str | None:
    """The job id from ``sbatch --parsable`` (``12`` or ``12;cluster``)."""
    for line in sbatch_output.splitlines():
        word = line.strip().partition(";")[0]
        if word.isdigit():
            return word
    return None
