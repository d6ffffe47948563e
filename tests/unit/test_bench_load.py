"""The benchmark's load scenario: its plans and how its figures are reported (pure parts)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from bench import report
from bench.load import LoadPlan, Sent, _durations, _stats


def test_both_plans_ask_for_more_runs_than_the_account_has() -> None:
    for plan in (LoadPlan.quick(), LoadPlan.full()):
        assert plan.demand_runs > plan.cap
        assert plan.workers == (1, 3)
    quick, full = LoadPlan.quick(), LoadPlan.full()
    assert quick.requests * quick.children < full.requests * full.children


def test_durations_run_from_the_post_to_the_requests_finish() -> None:
    sent = [
        Sent("ws_a", scheduled=0, sent=100.0, accepted=100.2, run_id="run_a"),
        Sent("ws_a", scheduled=0, sent=101.0, error="503"),
        Sent("ws_a", scheduled=0, sent=102.0, accepted=102.1, run_id="run_b"),
    ]
    runs: dict[str, dict[str, Any]] = {
        "run_a": {"finishedAt": "1970-01-01T00:01:50Z"},  # 110 s
        "run_b": {"finishedAt": None},
    }
    assert _durations(sent, runs) == [10.0]
    assert sent[0].latency is not None and round(sent[0].latency, 3) == 0.2
    assert sent[1].latency is None
    assert _stats([1.0, 2.0, 3.0]) == {"p50": 2.0, "p95": 2.9, "max": 3.0}
    assert _stats([]) == {"p50": None, "p95": None, "max": None}


def _run(workers: int, slowdown: float) -> dict[str, Any]:
    return {
        "workers": workers,
        "acceptLatency": {"p50": 0.05, "p95": 0.12, "max": 0.2},
        "allTerminalSecs": 95.4,
        "burstToTerminal": {"p50": 30.0, "p95": 61.0, "max": 70.0},
        "slots": {"cap": 8, "samples": 190, "mean": 6.4, "peak": 8, "utilisation": 0.8},
        "platformCalls": {"start": 300, "status": 700, "datasetPages": 246, "other": 60},
        "refusedStarts": 54,
        "trickle": {
            "alone": {"p50": 3.1, "p95": 3.3, "max": 3.4},
            "underLoad": {"p50": 3.1 * slowdown, "p95": 20.0, "max": 21.0},
            "slowdownP50": slowdown,
        },
        "cpuSecs": {"temporal": 30.0, "worker-1": 10.0, "worker-2": 5.5, "api": 2.0},
    }


def test_the_load_section_has_a_row_per_worker_count() -> None:
    plan = LoadPlan(
        requests=80,
        children=3,
        rate=2.0,
        cap=8,
        child_secs=2.5,
        items=100,
        trickle_requests=6,
        trickle_every_secs=6.0,
        workers=(1, 3),
    )
    found: dict[str, Any] = {"plan": asdict(plan), "demandRuns": plan.demand_runs}
    found["runs"] = [_run(1, 4.0)]
    found["runs"].append(_run(3, 2.5))
    lines = report.load_section(found)
    text = "\n".join(lines)
    assert "80 requests x 3 children at 2/s, runs of 2.5 s" in text
    assert "account cap 8 concurrent runs vs a demand of ≈ 15" in text
    rows = [line for line in lines if line.startswith("| 1 ") or line.startswith("| 3 ")]
    assert len(rows) == 2
    assert "| 6.4 / 8 of 8 (0.80) | 300 (54) | 700 | 246 | 60 |" in rows[0]
    assert rows[0].endswith("| 4.0x |") and rows[1].endswith("| 2.5x |")
    assert report.load_section(None) == [] and report.load_section({"runs": []}) == []


def test_cpu_of_every_worker_instance_is_counted_as_the_workers() -> None:
    assert report._workers_summed(_run(3, 1.0)["cpuSecs"]) == {
        "temporal": 30.0,
        "worker": 15.5,
        "api": 2.0,
    }
