"""The leader's per-rank score (console/hostprogs/pace/score.py): windows, the median,
two windows in a row, recovery ending a slow period. Counters are fed as the hosts'
meters send them (they only grow); the clock is passed in."""

from __future__ import annotations

from typing import Any

from console.hostprogs.pace.score import PaceBoard, pace_median


class Ranks:
    """Cumulative counters for ranks on hosts, advanced by per-second busy fractions."""

    def __init__(self, hosts: dict[int, str]) -> None:
        self.hosts = hosts
        self.counters = {r: {"busy_s": 0.0, "cpu_s": 0.0, "wall_s": 0.0} for r in hosts}

    def run(self, board: PaceBoard, start: float, seconds: int, busy: dict[int, float]) -> list:
        changes: list[dict[str, Any]] = []
        for second in range(1, seconds + 1):
            for rank, counter in self.counters.items():
                counter["busy_s"] += busy[rank]
                counter["cpu_s"] += busy[rank] / 2
                counter["wall_s"] += 1.0
                figures = {"rank": rank, **counter, "cause": f"cause of {rank}"}
                board.feed(self.hosts[rank], figures)
            changes += board.tick(start + second)
        return changes


def test_the_median_of_odd_and_even_counts() -> None:
    assert pace_median([0.2, 1.0, 0.3]) == 0.3
    assert pace_median([0.2, 0.4, 1.0, 0.3]) == 0.35


def test_a_rank_busy_four_times_the_median_for_two_windows_is_slow_from_the_first() -> None:
    board = PaceBoard(window_s=15, threshold=1.3, windows=2, start=0.0)
    ranks = Ranks({0: "node0", 1: "node1", 2: "node2"})
    busy = {0: 0.25, 1: 0.25, 2: 1.0}
    assert ranks.run(board, 0.0, 15, busy) == []  # one window high: not yet
    assert board.record()["slow_ranks"] == []
    (change,) = ranks.run(board, 15.0, 15, busy)
    assert change["event"] == "slow" and change["rank"] == 2 and change["host"] == "node2"
    assert change["relative"] == 4.0 and change["since"] == 0.0
    record = board.record()
    assert record["slow_ranks"] == [
        {"rank": 2, "host": "node2", "relative": 4.0, "cause": "cause of 2", "since": 0.0}
    ]
    pace = {p["rank"]: p for p in record["rank_pace"]}
    assert pace[0] == {
        "rank": 0, "host": "node0", "busy": 0.25, "wait": 0.75, "cpu": 0.125,
        "relative": 1.0, "window_end": 30.0,
    }  # fmt: skip
    assert pace[2]["busy"] == 1.0 and pace[2]["wait"] == 0.0
    assert record["slow_periods"] == [
        {"rank": 2, "host": "node2", "since": 0.0, "until": None, "cause": "cause of 2"}
    ]


def test_one_high_window_between_normal_ones_names_nobody() -> None:
    board = PaceBoard(window_s=10, threshold=1.3, windows=2, start=0.0)
    ranks = Ranks({0: "a", 1: "b", 2: "c", 3: "d"})
    even = dict.fromkeys(range(4), 0.5)
    changes = ranks.run(board, 0.0, 10, even)
    changes += ranks.run(board, 10.0, 10, {**even, 1: 0.9})  # one window 1.8x
    changes += ranks.run(board, 20.0, 10, even)
    changes += ranks.run(board, 30.0, 10, {**even, 1: 0.9})
    assert changes == [] and board.record()["slow_ranks"] == []
    # Just under the threshold window after window: never slow either.
    assert ranks.run(board, 40.0, 30, {**even, 1: 0.64}) == []


def test_recovery_ends_the_slow_period_and_a_new_one_starts_later() -> None:
    board = PaceBoard(window_s=10, threshold=1.3, windows=2, start=0.0)
    ranks = Ranks({0: "a", 1: "b", 2: "c"})
    slow = {0: 0.3, 1: 0.9, 2: 0.3}
    even = {0: 0.3, 1: 0.3, 2: 0.3}
    assert [c["event"] for c in ranks.run(board, 0.0, 20, slow)] == ["slow"]
    (ended,) = ranks.run(board, 20.0, 10, even)
    assert ended["event"] == "recovered" and ended["rank"] == 1 and ended["until"] == 30.0
    record = board.record()
    assert record["slow_ranks"] == []
    assert record["slow_periods"] == [
        {"rank": 1, "host": "b", "since": 0.0, "until": 30.0, "cause": "cause of 1"}
    ]
    assert [c["event"] for c in ranks.run(board, 30.0, 20, slow)] == ["slow"]
    periods = board.record()["slow_periods"]
    assert [(p["since"], p["until"]) for p in periods] == [(0.0, 30.0), (30.0, None)]


def test_windows_and_threshold_are_tunable() -> None:
    board = PaceBoard(window_s=5, threshold=2.0, windows=3, start=0.0)
    ranks = Ranks({0: "a", 1: "b", 2: "c"})
    assert ranks.run(board, 0.0, 15, {0: 0.3, 1: 0.3, 2: 0.5}) == []  # 1.67x < 2.0
    changes = ranks.run(board, 15.0, 15, {0: 0.3, 1: 0.3, 2: 0.7})
    assert [(c["event"], c["rank"], c["since"]) for c in changes] == [("slow", 2, 15.0)]
    assert len(ranks.run(board, 30.0, 1, {0: 0.3, 1: 0.3, 2: 0.7})) == 0


def test_an_idle_job_a_lone_rank_and_a_restarted_rank_are_not_scored_against_nothing() -> None:
    board = PaceBoard(window_s=10, threshold=1.3, windows=1, start=0.0)
    # Every rank nearly idle: the median's floor keeps 0.02 vs 0.004 from reading 5x.
    ranks = Ranks({0: "a", 1: "b", 2: "c"})
    assert ranks.run(board, 0.0, 10, {0: 0.004, 1: 0.004, 2: 0.02}) == []
    lone = PaceBoard(window_s=10, windows=1, start=0.0)
    assert Ranks({0: "a"}).run(lone, 0.0, 30, {0: 1.0}) == []  # nobody to compare with
    # Rank 1 restarts (its counters start again): its next window is not a negative one.
    ranks.counters[1] = {"busy_s": 0.0, "cpu_s": 0.0, "wall_s": 0.0}
    ranks.run(board, 10.0, 10, {0: 0.5, 1: 0.5, 2: 0.5})
    assert {p["rank"]: p["busy"] for p in board.record()["rank_pace"]} == {0: 0.5, 1: 0.5, 2: 0.5}


def test_a_rank_seen_for_less_than_half_a_window_waits_for_the_next() -> None:
    board = PaceBoard(window_s=10, windows=1, start=0.0)
    ranks = Ranks({0: "a", 1: "b", 2: "c"})
    ranks.run(board, 0.0, 10, {0: 0.3, 1: 0.3, 2: 0.3})
    late = Ranks({3: "d"})
    for second in range(1, 5):  # rank 3 joins with 4 s left: not scored this window
        late.counters[3]["busy_s"] += 1.0
        late.counters[3]["wall_s"] += 1.0
        board.feed("d", {"rank": 3, **late.counters[3]})
        ranks.run(board, 10.0 + second - 1, 1, {0: 0.3, 1: 0.3, 2: 0.3})
    assert board.tick(20.0) == []
    board.tick(20.0)
    assert 3 not in {p["rank"] for p in board.record()["rank_pace"]}
