"""Steps and throughput read from log lines: per rank, and per job both ways.

Per rank: last step (and epoch), steps/s measured from when steps arrived, printed
samples/s (img/sec, samples/s), printed it/s or steps/s, loss. Per job, side by side: the sum of
every rank's counter (Horovod style: each rank runs its share of the steps) and rank
0's counter (DDP style), aggregate samples/s, and the slowest rank with its lag.

Only the LAST match of each pattern in a batch matters. A default pattern's hint (a
small regex every match contains) is found in the run's lowercased text and only the
lines holding it are searched, newest first; a user pattern is first run once over the
run's joined text (C speed) and that run's lines are scanned backwards when it matched.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from console.logs.buffer import line_prefilter
from console.logs.models import LineRun, LineSource, LogLine, RankKey, as_runs

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_SEP = r"[ \t]*[:=#]?[ \t]*"

# Order matters: the first pattern that matches a line gives its step.
DEFAULT_STEP_PATTERNS: tuple[str, ...] = (
    # tqdm: " 45%|####5     | 450/1000 [00:10<00:12, 44.50it/s]"
    r"\d+%\|[^|\n]*\|[ \t]*(?P<step>\d+)/(?P<total>\d+)[ \t]*\[",
    # "Epoch 2 step 40", "epoch: 1, step: 7", "Epoch [3/10] Step [120/500]"
    r"\bepoch" + _SEP + r"\[?(?P<epoch>\d+)(?:/\d+)?\]?[ \t,;|-]*"
    r"(?:global[_ ])?(?:step|iter(?:ation)?|batch)"
    + _SEP
    + r"\[?(?P<step>\d+)(?:/(?P<total>\d+))?",
    # "step 40", "global_step=40", "Step 40/1000"
    r"\b(?:global[_ ])?step" + _SEP + r"\[?(?P<step>\d+)(?:[ \t]*/[ \t]*(?P<total>\d+))?",
    # "iter 40", "Iteration 40/1000"
    r"\biter(?:ation)?" + _SEP + r"\[?(?P<step>\d+)(?:[ \t]*/[ \t]*(?P<total>\d+))?",
)
DEFAULT_SAMPLES_PATTERNS: tuple[str, ...] = (
    # "samples/s 1234.5", "img/sec per GPU: 123.4", "images/sec: 10" (not "Total img/sec on")
    r"\b(?:samples|imgs?|images|examples)[ \t]*/[ \t]*s(?:ec)?(?:[ \t]+per[ \t]+GPU)?"
    + _SEP
    + r"(?P<value>"
    + _NUM
    + r")",
    # "1234.5 samples/s", "99 img/sec"
    r"(?P<value>" + _NUM + r")[ \t]*(?:samples|imgs?|images|examples)[ \t]*/[ \t]*s(?:ec)?\b",
)
_STEPS_PER_S = r"(?:global[_ ])?steps?[ \t]*/[ \t]*s(?:ec)?\b"
DEFAULT_RATE_PATTERNS: tuple[str, ...] = (
    # tqdm and HF trainers
    r"(?P<value>" + _NUM + r")[ \t]*(?P<unit>it/s)\b",
    r"(?P<value>" + _NUM + r")[ \t]*(?P<unit>s/it)\b",
    # the bundled examples' "steps/s 12.5", TF's "global_step/sec: 3.2", "12.5 steps/s"
    r"\b" + _STEPS_PER_S + _SEP + r"(?P<value>" + _NUM + r")",
    r"(?P<value>" + _NUM + r")[ \t]*" + _STEPS_PER_S,
)
DEFAULT_LOSS_PATTERNS: tuple[str, ...] = (r"\bloss" + _SEP + r"(?P<value>" + _NUM + r")",)

# Python's re has no fast literal scan for these case-insensitive patterns, and the
# ones that begin with a number try a match at every digit (about 7 ms per 10 kB run of
# trainer lines that hold "samples/s" but no "steps/s"). Each default has a hint: a
# small regex that every match contains, run on the lowercased text (case-sensitive, a
# literal start: fast). Only lines holding a hint are searched, newest first. User
# patterns have no hint and are searched over the whole run.
_HINT_BLOCK = 2048  # characters of a run looked at per hint search, from its end
_STEPS_PER_S_HINT = r"steps?[ \t]*/[ \t]*s"
_PER_S_HINT = r"(?:samples|imgs?|images|examples)[ \t]*/[ \t]*s"
_HINTS: dict[str, str] = dict(
    zip(DEFAULT_STEP_PATTERNS, (r"%\|", "epoch", "step", "iter"), strict=True)
) | {
    DEFAULT_SAMPLES_PATTERNS[0]: _PER_S_HINT,
    DEFAULT_SAMPLES_PATTERNS[1]: _PER_S_HINT,
    DEFAULT_RATE_PATTERNS[0]: "it/s",
    DEFAULT_RATE_PATTERNS[1]: "s/it",
    DEFAULT_RATE_PATTERNS[2]: _STEPS_PER_S_HINT,
    DEFAULT_RATE_PATTERNS[3]: _STEPS_PER_S_HINT,
    DEFAULT_LOSS_PATTERNS[0]: "loss",
}


_Compiled = tuple[re.Pattern[str], re.Pattern[str] | None, re.Pattern[str] | None]


@dataclass(frozen=True, slots=True)
class StepPatterns:
    """Regular expressions (case-insensitive) for steps, samples/s, it/s and loss."""

    step: tuple[str, ...] = DEFAULT_STEP_PATTERNS
    samples: tuple[str, ...] = DEFAULT_SAMPLES_PATTERNS
    rate: tuple[str, ...] = DEFAULT_RATE_PATTERNS
    loss: tuple[str, ...] = DEFAULT_LOSS_PATTERNS

    def compiled(self) -> dict[str, tuple[_Compiled, ...]]:
        """Per kind: (regex, hint, prefilter): hint finds, in the lowercased text, a
        piece every match contains; prefilter finds a match of the regex in lines joined
        by "\\n"."""
        out: dict[str, tuple[_Compiled, ...]] = {}
        for name in ("step", "samples", "rate", "loss"):
            kind = []
            for p in getattr(self, name):
                regex = re.compile(p, re.IGNORECASE)
                hint = _HINTS.get(p)
                must = re.compile(hint) if hint is not None else None
                kind.append((regex, must, line_prefilter(regex)))
            out[name] = tuple(kind)
        return out


@dataclass(frozen=True, slots=True)
class RankSteps:
    """One rank's progress at a moment (what the UI and the stall check read)."""

    key: RankKey
    host: str
    local_rank: int | None
    step: int | None
    epoch: int | None
    total: int | None
    steps_per_s: float | None  # measured from step arrivals; else as printed
    samples_per_s: float | None  # as printed by the trainer
    loss: float | None
    last_line_at: float | None  # when any line of this rank last arrived
    last_step_at: float | None  # when its step last changed
    step_interval_s: float | None  # recent time between step reports


@dataclass(frozen=True, slots=True)
class JobProgress:
    ranks: tuple[RankSteps, ...]
    sum_steps: int  # Horovod style: every rank's counter added up
    rank0_step: int | None  # DDP style
    total_steps: int | None
    samples_per_s: float | None  # sum over ranks that print it
    slowest: RankKey | None
    slowest_lag: int | None  # steps behind the furthest rank


@dataclass
class _RankState:
    key: RankKey
    host: str
    local_rank: int | None
    step: int | None = None
    epoch: int | None = None
    total: int | None = None
    printed_rate: float | None = None
    samples_per_s: float | None = None
    loss: float | None = None
    last_line_at: float | None = None
    last_step_at: float | None = None
    history: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=32))
    intervals: deque[float] = field(default_factory=lambda: deque(maxlen=8))


class StepTracker:
    """Feed it batches of lines; read per-rank and per-job progress at any time."""

    def __init__(self, patterns: StepPatterns | None = None, window_s: float = 60.0) -> None:
        compiled = (patterns or StepPatterns()).compiled()
        self._step = compiled["step"]
        self._samples = compiled["samples"]
        self._rate = compiled["rate"]
        self._loss = compiled["loss"]
        self.window_s = window_s
        self._ranks: dict[RankKey, _RankState] = {}

    def feed(self, lines: Iterable[LogLine]) -> None:
        groups: dict[RankKey, list[LineRun]] = {}
        seq = lines if isinstance(lines, Sequence) else list(lines)
        for run in as_runs(seq):
            group = groups.get(run.source.key)
            if group is None:
                groups[run.source.key] = [run]
            else:
                group.append(run)
        for key, group in groups.items():
            self._feed_rank(key, group)

    def _state(self, key: RankKey, source: LineSource) -> _RankState:
        state = self._ranks.get(key)
        if state is None:
            state = _RankState(key, source.host, source.local_rank)
            self._ranks[key] = state
        return state

    def _feed_rank(self, key: RankKey, group: list[LineRun]) -> None:
        state = self._state(key, group[0].source)
        state.last_line_at = group[-1].received
        # Newest run first: only the last match of each pattern counts.
        texts = [(run.text, run.text.lower(), run.parts is None) for run in reversed(group)]
        hit = _last_match(self._step, texts)
        if hit is not None:
            index, m = hit
            step = int(m["step"])
            groups = m.re.groupindex
            epoch = int(m["epoch"]) if "epoch" in groups and m["epoch"] else None
            total = int(m["total"]) if "total" in groups and m["total"] else None
            self._record_step(state, step, epoch, total, group[len(group) - 1 - index].received)
        hit = _last_match(self._samples, texts)
        if hit is not None:
            state.samples_per_s = float(hit[1]["value"])
        hit = _last_match(self._loss, texts)
        if hit is not None:
            state.loss = float(hit[1]["value"])
        hit = _last_match(self._rate, texts)
        if hit is not None:
            value = float(hit[1]["value"])
            # Only "s/it" is seconds per step; "it/s" and "steps/s" are already a rate.
            inverse = (hit[1].groupdict().get("unit") or "").lower() == "s/it"
            state.printed_rate = (1.0 / value if value > 0 else None) if inverse else value

    def _record_step(
        self, state: _RankState, step: int, epoch: int | None, total: int | None, at: float
    ) -> None:
        if epoch is not None:
            state.epoch = epoch
        if total is not None:
            state.total = total
        if step == state.step:
            return
        if state.last_step_at is not None and at > state.last_step_at:
            state.intervals.append(at - state.last_step_at)
        state.step = step
        state.last_step_at = at
        history = state.history
        if history and step < history[-1][1]:
            history.clear()  # a new epoch or a restart: rates start over
        history.append((at, step))
        while len(history) > 2 and at - history[0][0] > self.window_s:
            history.popleft()

    def ranks(self) -> tuple[RankSteps, ...]:
        return tuple(_snapshot(s) for s in sorted(self._ranks.values(), key=_order))

    def rank(self, key: RankKey) -> RankSteps | None:
        state = self._ranks.get(key)
        return _snapshot(state) if state is not None else None

    def job(self, total_steps: int | None = None) -> JobProgress:
        return job_progress(self.ranks(), total_steps)


def _order(state: _RankState) -> tuple[int, int, str]:
    return (0, state.key, "") if isinstance(state.key, int) else (1, 0, state.key)


def _last_match(
    patterns: Sequence[_Compiled],
    texts: Sequence[tuple[str, str, bool]],
) -> tuple[int, re.Match[str]] | None:
    """(index in ``texts``, match) of the newest line matched by the first pattern that
    matches anywhere (patterns are in order of preference). ``texts`` are runs, newest
    first, as (lines joined by "\\n", the same lowercased, whether no line holds "\\n")."""
    for pattern, hint, prefilter in patterns:
        for index, (joined, low, plain) in enumerate(texts):
            if hint is not None and len(low) == len(joined):
                m = _last_hinted_match(pattern, hint, joined, low)
            elif (hint is not None and hint.search(low) is None) or (
                prefilter is not None and plain and prefilter.search(joined) is None
            ):
                continue
            else:
                m = _last_line_match(pattern, joined)
            if m is not None:
                return index, m
    return None


def _last_hinted_match(
    pattern: re.Pattern[str], hint: re.Pattern[str], joined: str, low: str
) -> re.Match[str] | None:
    """As :func:`_last_line_match`, searching only the lines where ``hint`` (which no
    match can lack, and which never spans lines) is found in ``low``, ``joined``
    lowercased with the same length (so positions agree). The hint is looked for in
    whole-line blocks from the end: the newest line is usually in the first block."""
    end = len(joined)
    while end > 0:
        block = joined.rfind("\n", 0, max(0, end - _HINT_BLOCK)) + 1
        searched_from = end + 1  # start of the last line searched
        for at in reversed([m.start() for m in hint.finditer(low, block, end)]):
            if at >= searched_from:
                continue  # a second hint in a line already searched
            start = joined.rfind("\n", 0, at) + 1
            stop = joined.find("\n", at, end)
            m = pattern.search(joined[start : end if stop < 0 else stop])
            if m is not None:
                return m
            searched_from = start
        end = block - 1
    return None


def _last_line_match(pattern: re.Pattern[str], joined: str) -> re.Match[str] | None:
    """The match in the last line (of lines joined by "\\n") that ``pattern`` matches,
    each line searched on its own (so ``^`` and ``$`` mean the line's ends)."""
    end = len(joined)
    while end >= 0:
        start = joined.rfind("\n", 0, end) + 1
        m = pattern.search(joined[start:end])
        if m is not None:
            return m
        end = start - 1
    return None


def _snapshot(state: _RankState) -> RankSteps:
    rate: float | None = None
    history = state.history
    if len(history) >= 2:
        (t0, s0), (t1, s1) = history[0], history[-1]
        if t1 > t0:
            rate = (s1 - s0) / (t1 - t0)
    if rate is None:
        rate = state.printed_rate
    interval = None
    if state.intervals:
        ordered = sorted(state.intervals)
        interval = ordered[len(ordered) // 2]
    return RankSteps(
        key=state.key,
        host=state.host,
        local_rank=state.local_rank,
        step=state.step,
        epoch=state.epoch,
        total=state.total,
        steps_per_s=rate,
        samples_per_s=state.samples_per_s,
        loss=state.loss,
        last_line_at=state.last_line_at,
        last_step_at=state.last_step_at,
        step_interval_s=interval,
    )


def job_progress(ranks: Sequence[RankSteps], total_steps: int | None = None) -> JobProgress:
    """Both readings of a job's progress, aggregate samples/s, and the slowest rank."""
    stepped = [r for r in ranks if r.step is not None]
    sum_steps = sum(r.step for r in stepped if r.step is not None)
    rank0 = next((r.step for r in ranks if r.key == 0), None)
    printed = [r.samples_per_s for r in ranks if r.samples_per_s is not None]
    slowest: RankKey | None = None
    lag: int | None = None
    if stepped:

        def progress(r: RankSteps) -> tuple[int, int]:
            return (r.epoch or 0, r.step or 0)

        low = min(stepped, key=progress)
        high = max(stepped, key=progress)
        slowest = low.key
        lag = (high.step or 0) - (low.step or 0) if low.epoch == high.epoch else None
    totals = {r.total for r in stepped if r.total is not None}
    return JobProgress(
        ranks=tuple(ranks),
        sum_steps=sum_steps,
        rank0_step=rank0,
        total_steps=total_steps if total_steps is not None else (max(totals) if totals else None),
        samples_per_s=sum(printed) if printed else None,
        slowest=slowest,
        slowest_lag=lag,
    )


def gpu_util_by_rank(
    ranks: Sequence[RankSteps], util: Mapping[tuple[str, int], float]
) -> dict[RankKey, float]:
    """Map (host, GPU index) utilisation onto ranks, GPU index = local rank."""
    found: dict[RankKey, float] = {}
    for r in ranks:
        if r.local_rank is not None and (r.host, r.local_rank) in util:
            found[r.key] = util[(r.host, r.local_rank)]
    return found
