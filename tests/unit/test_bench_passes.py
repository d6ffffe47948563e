"""The benchmark's ingest figures are the best of several passes, on both sides of a ratio."""

from __future__ import annotations

from bench.__main__ import Plan
from bench.baselines import best_pass


def test_the_best_pass_is_kept_with_every_pass_beside_it() -> None:
    passes = [
        {"rowsPerSec": 70_000.0, "seconds": 1.43},
        {"rowsPerSec": 95_000.0, "seconds": 1.05},
        {"rowsPerSec": 80_000.0, "seconds": 1.25},
    ]
    assert best_pass(passes) == {
        "rowsPerSec": 95_000.0,
        "seconds": 1.05,
        "passes": [70_000.0, 95_000.0, 80_000.0],
    }


def test_the_full_run_repeats_every_size_and_the_quick_run_does_not() -> None:
    full = Plan.full()
    assert all(full.ingest_passes.get(size, 1) >= 2 for size in full.sizes)
    quick = Plan.quick()
    assert all(quick.ingest_passes.get(size, 1) == 1 for size in quick.sizes)
