"""``python -m bench [--quick] [--out FILE] [--svg FILE]``: run the benchmark, report it.

The plan (sizes, child counts, which baselines run at which size) is fixed per mode so two
runs of the same mode are comparable; the results file records the plan next to the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import platform as platform_module
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import baselines, chart, fanout, load, report, scenarios
from bench.stack import (
    POLL_INTERVAL_SECONDS,
    TIME_SCALE,
    app_stack,
    platform_stack,
    postgres_database,
    postgres_version,
)
from orchestrator.db.engine import build_engine

log = logging.getLogger("bench")

ITEM_BYTES = 500
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Plan:
    mode: str
    sizes: tuple[int, ...]
    #: The naive baseline (one INSERT per row) runs only up to this size, per database.
    naive_max: dict[str, int]
    latency_children: int
    latency_spread_secs: float
    fanout_children: int
    budget_secs: float
    #: Passes of the orchestrator's ingest and of the limit's two halves, per size; each keeps
    #: its best (a single pass swung the PostgreSQL ratio from 0.58 to 1.08 between runs).
    ingest_passes: dict[int, int] = field(default_factory=dict)

    @staticmethod
    def quick() -> Plan:
        return Plan(
            mode="quick",
            sizes=(10_000,),
            naive_max={"sqlite": 10_000, "postgresql": 10_000},
            latency_children=20,
            latency_spread_secs=8.0,
            fanout_children=30,
            budget_secs=180.0,
        )

    @staticmethod
    def full() -> Plan:
        return Plan(
            mode="full",
            sizes=(10_000, 100_000, 1_000_000),
            naive_max={"sqlite": 100_000, "postgresql": 100_000},
            latency_children=50,
            latency_spread_secs=25.0,
            fanout_children=100,
            budget_secs=1500.0,
            ingest_passes={10_000: 3, 100_000: 5, 1_000_000: 3},
        )


def machine_info() -> dict[str, Any]:
    cpu_model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu_model = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), ""
            )
    except OSError:
        pass
    mem_kib = 0
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            mem_kib = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
    except (OSError, StopIteration):
        pass
    packages: dict[str, str | None] = {}
    for name in ("temporalio", "sqlalchemy", "psycopg", "apify-client", "httpx", "fastapi"):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    commit: str | None = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],  # noqa: S607 - a read-only query
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    return {
        "cpus": os.cpu_count(),
        "cpuModel": cpu_model,
        "memGiB": round(mem_kib / 1024 / 1024, 1),
        "os": platform_module.platform(),
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "postgresql": postgres_version(),
        "packages": packages,
        "gitCommit": commit,
    }


def _warm_up(app: Any, platform: Any) -> None:
    # The first request pays for imports, connections and the first workflow tasks.
    scenarios.ingest(app, platform, 1_000, ITEM_BYTES)


def run_database(
    plan: Plan, platform: Any, tmp: Path, kind: str, url: str, baseline_url: str
) -> dict[str, Any]:
    """Scenario 1 and the baselines on one kind of database (plus 2 and 3 on SQLite)."""
    found: dict[str, Any] = {"ingest": [], "baselines": {}}
    base_db = baselines.BaselineDb(baseline_url, tmp / f"baseline-{kind}")
    # The app's own database, emptied and settled before each load as the baselines' is.
    app_db = build_engine(url)

    def ingest_pass(size: int, into: list[dict[str, Any]]) -> None:
        baselines.empty_items(app_db)
        baselines.settle(app_db)
        into.append(scenarios.ingest(app, platform, size, ITEM_BYTES))

    with app_stack(platform, tmp, url, kind) as app:
        _warm_up(app, platform)
        for size in plan.sizes:
            passes = plan.ingest_passes.get(size, 1)
            log.info("%s: ingest of %d items and its baselines (%d passes)", kind, size, passes)
            # The orchestrator's passes alternate with the limit's, so a slow spell of the
            # machine falls on both sides of the ratio rather than on one.
            orchestrator: list[dict[str, Any]] = []
            ingest_pass(size, orchestrator)
            run_input = scenarios.generator_input(size, ITEM_BYTES, 0.5, seed=f"bench-{size}")
            found["baselines"][str(size)] = baselines.run_baselines(
                platform.emulator_url,
                base_db,
                platform.generator_dataset,
                run_input,
                f"{kind}-{size}",
                with_naive=size <= plan.naive_max[kind],
                passes=passes,
                between=functools.partial(ingest_pass, size, orchestrator),
            )
            found["ingest"].append(baselines.best_pass(orchestrator))
        if kind == "sqlite":
            for webhooks in (True, False):
                log.info("latency, webhooks %s", "on" if webhooks else "dropped")
                found.setdefault("latency", []).append(
                    scenarios.latency(
                        app,
                        platform,
                        plan.latency_children,
                        plan.latency_spread_secs,
                        webhooks=webhooks,
                    )
                )
            log.info("fan-out of %d children", plan.fanout_children)
            found["fanout"] = scenarios.fanout(app, platform, plan.fanout_children)
    app_db.dispose()
    base_db.dispose()
    return found


def run_fanout(plan: Plan, platform: Any, tmp: Path, *, postgres: bool) -> dict[str, Any]:
    fan_plan = fanout.FanoutPlan.quick() if plan.mode == "quick" else fanout.FanoutPlan.full()
    found: dict[str, Any] = {}
    url = f"sqlite:///{tmp / 'fanout-sqlite.db'}"
    with app_stack(platform, tmp, url, "fanout-sqlite") as app:
        found["sqlite"] = fanout.fanout_levels(app, platform, fan_plan, "sqlite")
    if postgres and plan.mode != "quick":
        with (
            postgres_database("fanout") as pg_url,
            app_stack(platform, tmp, pg_url, "fanout-postgresql") as app,
        ):
            found["postgresql"] = fanout.fanout_levels(app, platform, fan_plan, "postgresql")
    return found


def run(plan: Plan, *, postgres: bool = True) -> dict[str, Any]:
    started = time.monotonic()
    load_at_start = list(os.getloadavg())
    results: dict[str, Any] = {
        "mode": plan.mode,
        "startedAt": datetime.now(UTC).isoformat(timespec="seconds"),
        "plan": asdict(plan),
        "config": {
            "itemBytes": ITEM_BYTES,
            "pageSize": baselines.PAGE_SIZE,
            "pollIntervalSecs": POLL_INTERVAL_SECONDS,
            "pollLongWaitSecs": 1,
            "emulatorTimeScale": TIME_SCALE,
            "emulatorCaps": "rate limit, concurrent-run and memory caps off",
        },
        "machine": machine_info(),
        "databases": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp_name:
        tmp = Path(tmp_name)
        with platform_stack(tmp) as platform:
            results["databases"]["sqlite"] = run_database(
                plan,
                platform,
                tmp,
                "sqlite",
                f"sqlite:///{tmp / 'app-sqlite' / 'orchestrator.db'}",
                f"sqlite:///{tmp / 'baseline-sqlite' / 'baseline.db'}",
            )
            if postgres:
                with postgres_database("orch") as url, postgres_database("base") as base_url:
                    results["databases"]["postgresql"] = run_database(
                        plan, platform, tmp, "postgresql", url, base_url
                    )
                # 5. The load: its own capped emulator and PostgreSQL database (several
                # workers need a database that takes concurrent writers).
                load_plan = load.LoadPlan.quick() if plan.mode == "quick" else load.LoadPlan.full()
                log.info("load scenario (%s)", plan.mode)
                results["load"] = load.run_load(platform, tmp, load_plan)
            # 6. Fan-out at scale: a fresh app stack per database (the quick run: SQLite).
            results["fanoutAtScale"] = run_fanout(plan, platform, tmp, postgres=postgres)
    results["durationSecs"] = round(time.monotonic() - started, 1)
    # Other work on the machine skews every figure; the load average makes it visible.
    results["loadAverage"] = {"start": load_at_start, "end": list(os.getloadavg())}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="10k items, fewer children")
    parser.add_argument("--out", type=Path, help="results JSON (default bench/results/<mode>.json)")
    parser.add_argument("--svg", type=Path, help="chart (default docs/benchmarks.svg, full only)")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument(
        "--report", type=Path, metavar="RESULTS", help="only print the table of a results file"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("orchestrator").setLevel(logging.WARNING)
    if args.report:
        results = json.loads(args.report.read_text())
    else:
        plan = Plan.quick() if args.quick else Plan.full()
        results = run(plan, postgres=not args.no_postgres)
        out = args.out or ROOT / "bench" / "results" / f"{plan.mode}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        results["summary"] = report.summarize(results)
        out.write_text(json.dumps(results, indent=2) + "\n")
        log.info("results written to %s", out)
        svg = args.svg or (ROOT / "docs" / "benchmarks.svg" if not args.quick else None)
        if svg is not None:
            svg.write_text(chart.render(results))
            log.info("chart written to %s", svg)
    sys.stdout.write(report.table(results) + "\n")
    # Written and reported all the same, but a scenario that did not finish fails the run.
    return 1 if any("failed" in e for e in results.get("fanoutAtScale", {}).values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
