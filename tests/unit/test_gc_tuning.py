"""The console's collector setting: young collections less often than Python's default,
so a log firehose does not trigger a full collection (130-170 ms) several times a second."""

from __future__ import annotations

import gc

from console.ui.app import GC_YOUNG_THRESHOLD, tune_collector


def test_young_threshold_is_raised_and_the_others_kept() -> None:
    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        tune_collector()
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, 10, 10)
        gc.set_threshold(50_000, 5, 7)  # a setting already higher is left alone
        tune_collector()
        assert gc.get_threshold() == (50_000, 5, 7)
    finally:
        gc.set_threshold(*saved)
