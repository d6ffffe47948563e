"""The benchmark's verdicts: a target is judged on the exact figure, not the printed one."""

from __future__ import annotations

from typing import Any

import pytest
from bench.report import summarize


def results(orchestrator: float) -> dict[str, Any]:
    """One PostgreSQL ingest of 100k items against a raw COPY limit of 100k rows/s."""
    return {
        "mode": "full",
        "plan": {"budget_secs": 1500},
        "durationSecs": 1000.0,
        "databases": {
            "postgresql": {
                "ingest": [
                    {
                        "items": 100_000,
                        "rowsPerSec": orchestrator,
                        "platformCalls": {"start": 1, "status": 1, "pages": 100},
                        "callBound": 103,
                    }
                ],
                "baselines": {
                    "100000": {
                        "simple": {"rowsPerSec": 20_000},
                        "download": {"rowsPerSec": 300_000},
                        "insertCopyDirect": {"rowsPerSec": 100_000},
                    }
                },
            }
        },
    }


@pytest.mark.parametrize(
    ("orchestrator", "shown", "met"),
    [(84_900.0, 0.849, False), (85_000.0, 0.85, True), (99_000.0, 0.99, True)],
)
def test_the_share_of_the_limit_is_judged_unrounded(
    orchestrator: float, shown: float, met: bool
) -> None:
    targets = summarize(results(orchestrator))["targets"]
    (share,) = [t for t in targets if t["target"].startswith("ingest ≥ 85% of limit")]
    assert (share["value"], share["met"]) == (shown, met)
    # The ratios table keeps two decimals.
    (row,) = summarize(results(orchestrator))["ratios"]["postgresql"]
    assert row["vsLimit"] == round(orchestrator / 100_000, 2)
