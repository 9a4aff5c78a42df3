"""Rank attribution: which job, host, rank and stream a line belongs to.

Two sources, combined per file:
- the file itself (``LogFile`` metadata from the plan, or, for files found by listing
  the job directory, its place in the layout of ``console/jobs/paths.py``);
- the prefix a launcher puts on a combined stream: Open MPI ``--tag-output``
  (``[1,0]<stdout>:``), horovodrun (``[1]<stdout>:``, also inside each rank's own
  ``--output-filename`` file), torchrun ``--tee`` (``[default0]:``, role + LOCAL rank) and
  torch's error output (``[rank0]: ``, GLOBAL rank). The prefix is removed from the text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from console.jobs.models import LogFile, RankLaunch
from console.logs.models import LineRun, LineSource, LogLine, run_of_texts, runs_of_text

# One pass decides which launcher prefix (if any) a line carries.
_PREFIX = re.compile(
    r"\[(?:"
    r"(?P<mjob>\d+),(?P<mrank>\d+)\]<(?P<mstream>stdout|stderr|stddiag)>:"  # mpirun
    r"|(?P<hrank>\d+)\]<(?P<hstream>stdout|stderr)>:"  # horovodrun
    r"|rank(?P<grank>\d+)\]: ?"  # torch, global rank
    r"|(?P<role>[A-Za-z_][A-Za-z_-]*?)(?P<lrank>\d+)\]:"  # torchrun --tee, role+local
    r")"
)

_HOROVOD_TAG = re.compile(r"^\[\d+\]<(?:stdout|stderr)>:", re.M)
_MPI_TAG = re.compile(r"\[\d+,\d+\]<(?:stdout|stderr|stddiag)>:")
_RANK_PREFIX = re.compile(r"\[rank(?P<grank>\d+)\]: ?")
_TORCHRUN_FILE = re.compile(r"/attempt_\d+/(?P<local>\d+)/(?P<stream>stdout|stderr)\.log$")
_MPI_RANK_FILE = re.compile(r"/rank\.(?P<rank>\d+)/(?P<stream>stdout|stderr)$")
_PROCESS_FILE = re.compile(r"/(?P<role>[A-Za-z_]+)-(?P<index>\d+)\.(?P<ext>out|err|log)$")
_TASK_ROLES = ("ps", "worker", "chief", "evaluator")


@dataclass(frozen=True, slots=True)
class FileContext:
    """Everything needed to attribute the lines of one file on one host."""

    job_id: str
    host: str
    path: str
    stream: str
    role: str
    rank: int | None = None
    local_rank: int | None = None
    task_index: int | None = None
    node_ranks: tuple[int, ...] = ()  # global ranks of this node's local ranks 0, 1, ...
    node_rank: int | None = None
    nproc_per_node: int | None = None

    @property
    def attributed(self) -> bool:
        """The file belongs to one rank or task: its lines carry no launcher prefix."""
        return self.rank is not None or self.task_index is not None

    def source(self) -> LineSource:
        return LineSource(
            self.job_id, self.host, self.rank, self.local_rank, self.stream, self.role,
            self.task_index,
        )  # fmt: skip

    def global_rank(self, local: int) -> int | None:
        if local < len(self.node_ranks):
            return self.node_ranks[local]
        if self.node_rank is not None and self.nproc_per_node:
            return self.node_rank * self.nproc_per_node + local
        return None


def _argv_int(argv: Sequence[str], *names: str) -> int | None:
    for i, word in enumerate(argv):
        for name in names:
            value: str | None = None
            if word == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif word.startswith(name + "="):
                value = word[len(name) + 1 :]
            if value is not None and value.isdigit():
                return int(value)
    return None


def context_for(job_id: str, host: str, log: LogFile, launch: RankLaunch | None) -> FileContext:
    """Attribution of a planned log file (``launch`` is the process that writes it)."""
    node_rank = nproc = None
    ranks: tuple[int, ...] = ()
    if launch is not None:
        ranks = launch.ranks
        env_rank = launch.env.get("NODE_RANK", "")
        node_rank = (
            int(env_rank)
            if env_rank.isdigit()
            else _argv_int(launch.argv, "--node-rank", "--node_rank")
        )
        nproc = _argv_int(launch.argv, "--nproc-per-node", "--nproc_per_node")
    rank = log.rank
    local = log.local_rank
    if rank is None and local is not None and log.role == "rank":
        rank = FileContext(job_id, host, "", "", "", node_ranks=ranks).global_rank(local)
    return FileContext(
        job_id=job_id,
        host=log.node or host,  # a Slurm task's lines name its node, not the reader
        path=log.path,
        stream=log.stream,
        role=log.role,
        rank=rank,
        local_rank=local,
        task_index=log.index,
        node_ranks=ranks,
        node_rank=node_rank,
        nproc_per_node=nproc,
    )


def guess_context(job_id: str, host: str, path: str, node_ranks: Sequence[int] = ()) -> FileContext:
    """Attribution of a file found by listing the job directory (no plan at hand)."""
    m = _TORCHRUN_FILE.search(path)
    if m:
        local = int(m["local"])
        ctx = FileContext(job_id, host, path, m["stream"], "rank", node_ranks=tuple(node_ranks))
        return FileContext(
            job_id,
            host,
            path,
            m["stream"],
            "rank",
            ctx.global_rank(local),
            local,
            node_ranks=tuple(node_ranks),
        )
    m = _MPI_RANK_FILE.search(path)
    if m:
        return FileContext(job_id, host, path, m["stream"], "rank", rank=int(m["rank"]))
    m = _PROCESS_FILE.search(path)
    if m:
        role, index = m["role"], int(m["index"])
        stream = {"out": "stdout", "err": "stderr"}.get(m["ext"], "combined")
        if role in _TASK_ROLES:
            return FileContext(job_id, host, path, stream, role, task_index=index)
        if role == "rank":
            return FileContext(job_id, host, path, stream, "rank", rank=index)
        # torchrun / launcher: a combined stream whose lines carry launcher prefixes
        return FileContext(
            job_id,
            host,
            path,
            stream,
            "launcher",
            node_ranks=tuple(node_ranks),
            node_rank=index if role == "torchrun" and not node_ranks else None,
        )
    return FileContext(job_id, host, path, "combined", "launcher")


def attribute(ctx: FileContext, texts: Sequence[str], received: float) -> list[LogLine]:
    """LogLines for the lines of one file, prefixes parsed where the file is combined."""
    job, host, stream = ctx.job_id, ctx.host, ctx.stream
    if ctx.attributed:
        rank, local, role, index = ctx.rank, ctx.local_rank, ctx.role, ctx.task_index
        new = tuple.__new__
        return [
            new(LogLine, (job, host, rank, local, stream, t, received, role, index)) for t in texts
        ]
    out: list[LogLine] = []
    append = out.append
    match = _PREFIX.match
    base_role = ctx.role
    for text in texts:
        m = match(text) if text.startswith("[") else None
        if m is None:
            append(LogLine(job, host, None, None, stream, text, received, base_role, None))
            continue
        rest = text[m.end() :]
        if m["mrank"] is not None:
            mstream = m["mstream"]
            if "]<std" in rest:
                # Open MPI tags every write, so a line written in two writes (Python's
                # unbuffered stderr: text, then "\n") carries a second tag mid-line.
                rest = _MPI_TAG.sub("", rest)
            append(
                LogLine(
                    job,
                    host,
                    int(m["mrank"]),
                    None,
                    "stderr" if mstream == "stderr" else "stdout",
                    rest,
                    received,
                    "rank",
                )
            )
        elif m["hrank"] is not None:
            hstream = m["hstream"]
            append(LogLine(job, host, int(m["hrank"]), None, hstream, rest, received, "rank"))
        elif m["grank"] is not None:
            grank = int(m["grank"])
            local = None
            if grank in ctx.node_ranks:
                local = ctx.node_ranks.index(grank)
            append(LogLine(job, host, grank, local, stream, rest, received, "rank"))
        else:
            local = int(m["lrank"])
            grank_of_local = ctx.global_rank(local)
            # torchrun --tee over torch's own error prefix: "[default1]:[rank1]: ..."
            inner = _RANK_PREFIX.match(rest) if rest.startswith("[rank") else None
            if inner is not None:
                grank_of_local = int(inner["grank"])
                rest = rest[inner.end() :]
            append(LogLine(job, host, grank_of_local, local, stream, rest, received, "rank"))
    return out


class FileAttribution:
    """Turns one file's decoded chunks into runs: a rank's own file is one run per chunk
    with one shared source; a launcher's combined file is parsed line by line and cut
    into runs of consecutive lines of the same prefix (sources shared too).

    A line longer than the follower's ``max_line`` comes as several chunks, the prefix
    only on the first: the line a chunk leaves open (no line end) is remembered, and the
    next chunk's first line continues it under the same rank, its text never read as a
    prefix (a 50 MB line's pieces read ``launcher`` before)."""

    __slots__ = ("_open", "_sources", "ctx", "source")

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.source = ctx.source()
        self._sources: dict[tuple[object, ...], LineSource] = {}
        self._open: LogLine | None = None  # the last line, when its chunk had no line end

    def runs(self, text: str, received: float) -> list[LineRun]:
        if self.ctx.attributed and text.startswith("[") and _HOROVOD_TAG.match(text):
            # horovodrun tags every line of a rank's own file with that rank's prefix
            text = _HOROVOD_TAG.sub("", text)
        chunk = runs_of_text(self.source, received, text)
        if self.ctx.attributed or not chunk:
            return chunk
        texts = chunk[0].texts()
        carried = self._open
        lines = attribute(self.ctx, texts[1:] if carried else texts, received)
        if carried is not None:
            lines.insert(0, carried._replace(text=texts[0], received=received))
        self._open = lines[-1] if not text.endswith(("\n", "\r")) else None
        out: list[LineRun] = []
        group: list[str] = []
        head: LogLine | None = None
        for line in lines:
            if head is None or line[2:5] != head[2:5] or line.role != head.role:
                if head is not None:
                    out.append(run_of_texts(self._shared(head), received, group))
                head, group = line, []
            group.append(line.text)
        if head is not None:
            out.append(run_of_texts(self._shared(head), received, group))
        return out

    def _shared(self, line: LogLine) -> LineSource:
        key = (line.rank, line.local_rank, line.stream, line.role, line.task_index)
        source = self._sources.get(key)
        if source is None:
            source = self._sources[key] = LineSource.of(line)
        return source


def split_long(texts: list[str], limit: int) -> list[str]:
    """Lines longer than ``limit`` characters become several lines of at most ``limit``."""
    if not texts or max(map(len, texts)) <= limit:
        return texts
    out: list[str] = []
    for t in texts:
        if len(t) <= limit:
            out.append(t)
        else:
            out.extend(t[i : i + limit] for i in range(0, len(t), limit))
    return out
