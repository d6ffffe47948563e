"""The benchmark's fan-out scenario: its plans, its profile summary and how its figures are
reported and judged (pure parts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bench import fanout, report
from bench.fanout import FanoutPlan, profile_summary, vs_floor


def test_the_full_plan_has_the_levels_of_the_issue() -> None:
    assert FanoutPlan.full().levels == (100, 500, 1000)
    quick = FanoutPlan.quick()
    assert quick.levels[0] == 100 and max(quick.levels) < 500


def test_the_profile_summary_leaves_waiting_threads_out(tmp_path: Path) -> None:
    raw = tmp_path / "worker.txt"
    raw.write_text(
        "main;run (a.py:1);ingest (b.py:2) 6\n"
        "main;run (a.py:1);poll (c.py:3) 2\n"
        "pool;_worker (concurrent/futures/thread.py:81);get (queue.py:9) 50\n"
        "loop;select (selectors.py:4) 40\n"
    )
    found = profile_summary(raw)
    assert found["busySamples"] == 8
    shares = {entry["frame"]: entry["share"] for entry in found["top"]}
    assert shares["run (a.py:1)"] == 1.0
    assert shares["ingest (b.py:2)"] == 0.75 and shares["poll (c.py:3)"] == 0.25


def _level(children: int, spawned: float, overhead: float, cpu: float) -> dict[str, Any]:
    return {
        "children": children,
        "spawnedSecs": spawned,
        "terminalSecs": overhead + 3,
        "closedSecs": overhead + 6,
        "overheadSecs": overhead,
        "historyEventsPerChild": 25.0,
        "masterEventsPerChild": 6.0,
        "pollerEventsPerChild": 19.0,
        "cpuSecsPerChild": {"temporal": 0.05, "worker": 0.07, "api": 0.01, "emulator": 0.01},
        "cpuMsPerChild": cpu,
        "vsFirstPerChild": {},
    }


def test_targets_judge_500_against_100_per_child() -> None:
    levels = [_level(100, 2.0, 4.0, 150.0), _level(500, 18.0, 28.0, 130.0)]
    base = levels[0]
    for level in levels:
        scale = base["children"] / level["children"]
        level["vsFirstPerChild"] = {
            "spawned": round(level["spawnedSecs"] * scale / base["spawnedSecs"], 2),
            "overhead": round(level["overheadSecs"] * scale / base["overheadSecs"], 2),
            "cpu": round(level["cpuMsPerChild"] / base["cpuMsPerChild"], 2),
        }
    found = {
        "sqlite": {"plan": {"per_request": 100, "child_secs": 3.0, "items": 100}, "levels": levels}
    }
    targets = {t["target"]: t for t in report.fanout_targets(found)}
    assert targets["fan-out CPU per child, 500 vs 100 (sqlite)"]["met"]
    assert not targets["fan-out spawn time per child, 500 vs 100 (sqlite)"]["met"]  # 1.8
    assert not targets["fan-out of 500, all spawned (sqlite)"]["met"]
    rows = [line for line in report.fanout_section(found) if line.startswith("| sqlite")]
    assert len(rows) == 2 and "| 500 | 18.0 | 31.0 | 34.0 |" in rows[1]


def test_a_level_is_read_against_the_engines_floor() -> None:
    level = _level(500, 20.0, 40.0, 160.0)  # Temporal + worker: 50 + 70 = 120 ms per child
    floor = {
        "startedSecs": 4.0,
        "doneSecs": 16.0,
        "cpuMsPerChild": {"temporal": 30.0, "worker": 10.0},
        "cpuMsPerChildTotal": 40.0,
    }
    assert vs_floor(level, floor) == {
        "spawned": 5.0,
        "overhead": 2.5,
        "cpuTemporalWorker": 3.0,
        "cpu": 4.0,
    }
    level["floor"] = floor
    level["vsFirstPerChild"] = {"spawned": 1.0, "overhead": 1.5, "cpu": 0.9}
    level["floorVsFirstPerChild"] = {"started": 1.1, "done": 1.37, "cpu": 1.2}
    found = {
        "sqlite": {"plan": {"per_request": 100, "child_secs": 3.0, "items": 100}, "levels": [level]}
    }
    (row,) = [line for line in report.fanout_section(found) if line.startswith("| sqlite")]
    assert row.endswith("| 4.0 / 16.0, 40 | 1.37 / 1.20 |")
    del level["floor"]  # results recorded before the floor was measured
    (row,) = [line for line in report.fanout_section(found) if line.startswith("| sqlite")]
    assert row.endswith("| - | - |")


def test_a_level_that_does_not_finish_stops_the_bigger_ones_and_fails_its_target(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A stuck level is reported with what it waited on, and the stacks' logs kept; the
    levels before it stand."""
    ran: list[int] = []

    def level(app: Any, platform: Any, plan: Any, children: int, *rest: Any) -> dict[str, Any]:
        ran.append(children)
        if children == 500:
            raise TimeoutError("fan-out of 500: 2 of 5 requests not terminal")
        found = _level(children, 2.0, 4.0, 150.0)
        found["floor"] = {"startedSecs": 1.0, "doneSecs": 2.0, "cpuMsPerChildTotal": 40.0}
        return found

    class Stack:
        def __init__(self, name: str) -> None:
            self.log_dir = tmp_path / name / "logs"
            self.log_dir.mkdir(parents=True)
            (self.log_dir / f"{name}.log").write_text(f"{name} was here\n")

    class Platform:
        stack = Stack("emulator")

    class App:
        stack = Stack("worker")

        def submit(self, body: Any) -> str:
            return "warm-up"

        def wait_terminal(self, run_id: str, timeout: float) -> None:
            return None

    monkeypatch.setattr(fanout, "fanout_level", level)
    monkeypatch.setattr(fanout, "FAILED_LOGS", tmp_path / "kept")
    found = fanout.fanout_levels(App(), Platform(), FanoutPlan.full(), "postgresql")  # type: ignore[arg-type]
    assert ran == [100, 500]
    assert [entry["children"] for entry in found["levels"]] == [100]
    assert found["failed"].startswith("fan-out of 500: 2 of 5 requests not terminal (logs kept")
    (kept,) = (tmp_path / "kept").iterdir()
    assert kept.name.startswith("fanout-postgresql-500-") and str(kept) in found["failed"]
    assert (kept / "app" / "worker.log").read_text() == "worker was here\n"
    assert (kept / "platform" / "emulator.log").exists()
    targets = {t["target"]: t for t in report.fanout_targets({"postgresql": found})}
    stopped = targets["fan-out at scale finished (postgresql)"]
    assert not stopped["met"] and "2 of 5 requests" in stopped["value"]
    rows = [line for line in report.fanout_section({"postgresql": found}) if "stopped" in line]
    assert len(rows) == 1
