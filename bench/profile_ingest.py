"""Where the orchestrator's ingest time goes: its ingest activity against the two halves alone.

``python -m bench.profile_ingest [--items N] [--db sqlite|postgresql] [--cprofile]`` starts a
platform emulator (a child process on a free port, stopped at the end), creates one generator
dataset and measures, one after another on the same dataset and database:

- **serve**: the emulator's raw JSON Lines rate, the benchmark's "download only" baseline
  (official client, nothing decoded);
- **download**: the orchestrator's own adapter (``ApifyPlatform.dataset_page``, through the
  official client) reading every page, nothing written;
- **insert**: the same rows, read beforehand, bulk-inserted with nothing downloaded, with the
  benchmark's insert-only baselines (``bench.baselines``);
- **activity**: the orchestrator's real ``ingest_dataset`` activity (``ActivityEnvironment``,
  real adapter, real database, the default page size) on a stored child, as the worker runs it
  minus Temporal.

``activity / limit`` with limit = min(download, fastest insert) is the ratio the benchmark
reports end to end. ``--cprofile`` also profiles the activity: the event loop (HTTP, line
splitting) and the database threads (``deps.tx``) separately.

Trade-off: no Temporal and no workflow around the activity, so noticing the end and
scheduling the activity are not counted (the benchmark's "ingest only" column is the same
measure inside the stack).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import os
import pstats
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpx
from sqlalchemy import Connection, func, select
from temporalio.testing import ActivityEnvironment

from bench import baselines
from bench.stack import EMULATOR_TOKEN, HOST, free_ports, postgres_database
from orchestrator.activities.deps import ActivityDeps
from orchestrator.activities.ingest import IngestActivities
from orchestrator.config.settings import Settings
from orchestrator.db.engine import build_engine, migrate
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.schema import scrape_items
from orchestrator.domain.ids import child_id, new_run_id
from orchestrator.domain.lifecycle import ChildState
from orchestrator.worker import activity_config, build_platform
from orchestrator.workflows.types import IngestInput

P = ParamSpec("P")
T = TypeVar("T")


@contextlib.contextmanager
def emulator() -> Iterator[str]:
    (port,) = free_ports(1)
    env = {
        **os.environ,
        "APIFY_EMULATOR_RATE_LIMIT_RPS": "0",
        "APIFY_EMULATOR_LOG_LEVEL": "WARNING",
    }
    proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "apify_emulator", "--host", HOST, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://{HOST}:{port}"
    try:
        for _ in range(100):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/_emulator/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def make_dataset(url: str, items: int) -> str:
    with httpx.Client(
        base_url=url, timeout=60, headers={"Authorization": f"Bearer {EMULATOR_TOKEN}"}
    ) as http:
        run = http.post(
            "/v2/actors/ultron~generator/runs",
            params={"memory": 256, "waitForFinish": 60},
            json={"items": items, "itemBytes": 500, "durationSecs": 0.1, "seed": "profile"},
        ).json()["data"]
        for _ in range(60):
            if run["status"] == "SUCCEEDED":
                return str(run["defaultDatasetId"])
            run = http.get(f"/v2/actor-runs/{run['id']}", params={"waitForFinish": 5}).json()[
                "data"
            ]
    raise RuntimeError("the generator run did not succeed")


def _settings(url: str) -> Settings:
    """The worker's settings against the benchmark's emulator: its public token and the
    development secrets (nothing here is reachable from outside), pacing off as the
    emulator enforces no rate limit in the benchmark (bench/stack.py)."""
    return Settings(
        _env_file=None,
        apify_api_url=url,
        apify_token=EMULATOR_TOKEN,
        insecure_dev_mode=True,
        platform_rate_limit_per_resource=0,
        platform_rate_limit_run_starts=0,
        platform_rate_limit_overall=0,
    )


def _rate(rows: int, seconds: float) -> dict[str, float]:
    return {"rows": rows, "seconds": round(seconds, 3), "rowsPerSec": round(rows / seconds, 1)}


async def download(url: str, dataset_id: str, page: int, keep: list[bytes]) -> dict[str, float]:
    """The orchestrator's adapter reading every page (one item more than a page, as the
    activity asks), nothing written; the lines are kept for the insert-only runs."""
    platform = build_platform(_settings(url))
    start = time.perf_counter()
    offset = 0
    for _ in range(baselines.MAX_PAGES):
        lines = await platform.dataset_page(dataset_id, offset, page + 1)
        keep.extend(lines[:page])
        offset += len(lines[:page])
        if len(lines) <= page:
            break
    return _rate(offset, time.perf_counter() - start)


@dataclass(frozen=True)
class _ProfiledDeps(ActivityDeps):
    """``ActivityDeps`` whose transactions are profiled on their worker threads."""

    profiles: list[cProfile.Profile] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def tx(
        self,
        fn: Callable[Concatenate[Connection, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        def run() -> T:
            profiler = cProfile.Profile()
            profiler.enable()
            try:
                with self.engine.begin() as conn:
                    return fn(conn, *args, **kwargs)
            finally:
                profiler.disable()
                with self.lock:
                    self.profiles.append(profiler)

        return await asyncio.to_thread(run)


def _stored_child(engine: Any, dataset_id: str) -> str:
    """A request with one child whose platform run succeeded, waiting to be ingested."""
    run_id = new_run_id()
    cid = child_id(run_id, 0)
    new = run_queries.NewRun(
        id=run_id,
        workspace_id="ws_bench",
        conversation_id=None,
        skill_run_id=None,
        callback_url=None,
        children=(
            run_queries.NewChild(
                id=cid,
                idx=0,
                actor="ultron-generator",
                platform_actor_id="ultron~generator",
                input={},
                options={},
            ),
        ),
    )
    with engine.begin() as conn:
        run_queries.insert_run(conn, new)
        run_queries.transition_child(
            conn, cid, ChildState.RUNNING, platform_run_id="profile", dataset_id=dataset_id
        )
        run_queries.transition_child(conn, cid, ChildState.INGESTING)
    return cid


def activity(url: str, dataset_id: str, db_url: str, profile: bool) -> tuple[dict[str, float], str]:
    """The real ingest activity on a fresh child; its rate and (with ``profile``) a report."""
    engine = build_engine(db_url)
    cid = _stored_child(engine, dataset_id)
    settings = _settings(url)
    deps_type = _ProfiledDeps if profile else ActivityDeps
    deps = deps_type(
        engine=engine, platform=build_platform(settings), config=activity_config(settings)
    )
    ingest = IngestActivities(deps).ingest_dataset
    loop_profiler = cProfile.Profile() if profile else None
    start = time.perf_counter()
    if loop_profiler:
        loop_profiler.enable()
    result = asyncio.run(
        ActivityEnvironment().run(ingest, IngestInput(child_id=cid, dataset_id=dataset_id))
    )
    if loop_profiler:
        loop_profiler.disable()
    seconds = time.perf_counter() - start
    with engine.connect() as conn:
        stored = conn.execute(
            select(func.count()).select_from(scrape_items).where(scrape_items.c.child_id == cid)
        ).scalar_one()
    engine.dispose()
    if stored != result.items:
        raise RuntimeError(f"the activity reported {result.items} rows, {stored} are stored")
    report = ""
    if loop_profiler and isinstance(deps, _ProfiledDeps):
        buf = io.StringIO()
        buf.write("-- event loop (HTTP, splitting, scheduling) --\n")
        pstats.Stats(loop_profiler, stream=buf).sort_stats("tottime").print_stats(12)
        buf.write("-- database threads (deps.tx) --\n")
        threads = pstats.Stats(deps.profiles[0], stream=buf)
        for extra in deps.profiles[1:]:
            threads.add(extra)
        threads.sort_stats("tottime").print_stats(12)
        report = buf.getvalue()
    return {**_rate(int(stored), seconds), "pages": result.pages}, report


INSERTS = ("insert", "insertCopy", "insertCopyDirect")


def _halves(
    url: str, dataset_id: str, page: int, base: baselines.BaselineDb, label: str
) -> dict[str, dict[str, Any]]:
    """One pass of the two halves alone: serving, the adapter's download, every insert."""
    raw: list[bytes] = []
    found = {
        "serve": baselines.download_only(url, dataset_id),
        "download": asyncio.run(download(url, dataset_id, page, raw)),
    }
    lines = [line.decode() for line in raw]
    raw.clear()
    found["insert"] = baselines.insert_only(base, lines, label)
    if not base.sqlite:
        found["insertCopy"] = baselines.insert_only_copy(base, lines, label)
        found["insertCopyDirect"] = baselines.insert_only_copy_direct(base, lines, label)
    return found


def measure(items: int, db: str, profile: bool, repeat: int) -> dict[str, Any]:
    """Every stage ``repeat`` times, interleaved; each stage's best pass is kept (on a shared
    machine the least disturbed one), so ratios compare like with like."""
    page = Settings(_env_file=None).dataset_page_size
    found: dict[str, Any] = {"items": items, "db": db, "pageSize": page, "repeat": repeat}
    passes: dict[str, list[dict[str, Any]]] = {}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-prof-")))
        if db == "sqlite":
            db_url = f"sqlite:///{tmp / 'profile.db'}"
            base_url = f"sqlite:///{tmp / 'baseline' / 'baseline.db'}"
        else:
            db_url = stack.enter_context(postgres_database("prof"))
            base_url = stack.enter_context(postgres_database("profbase"))
        engine = build_engine(db_url)
        migrate(engine)
        engine.dispose()
        base = baselines.BaselineDb(base_url, tmp / "baseline")
        stack.callback(base.dispose)
        url = stack.enter_context(emulator())
        dataset_id = make_dataset(url, items)
        for n in range(repeat):
            for name, measured in _halves(url, dataset_id, page, base, f"p{n}").items():
                passes.setdefault(name, []).append(measured)
            measured, report = activity(url, dataset_id, db_url, profile and n == repeat - 1)
            passes.setdefault("activity", []).append(measured)
            found["profile"] = report
    for name, runs in passes.items():
        found[name] = max(runs, key=lambda r: float(r["rowsPerSec"]))
        found[name]["passes"] = [r["rowsPerSec"] for r in runs]
    inserts = [found[k]["rowsPerSec"] for k in INSERTS if k in found]
    found["limit"] = min(found["download"]["rowsPerSec"], max(inserts))
    found["activityVsLimit"] = round(found["activity"]["rowsPerSec"] / found["limit"], 2)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_ingest")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--cprofile", action="store_true", help="also profile the activity")
    parser.add_argument("--repeat", type=int, default=3, help="passes; each stage's best")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    found = measure(args.items, args.db, args.cprofile, max(1, args.repeat))
    out = sys.stdout
    out.write(
        f"{found['items']:,} items on {found['db']}, pages of {found['pageSize']}, "
        f"best of {found['repeat']}, "
        f"1-min load average {load:.2f} → {os.getloadavg()[0]:.2f}\n"
    )
    for name in ("serve", "download", *INSERTS, "activity"):
        if name in found:
            entry = found[name]
            every = " ".join(f"{rate:,.0f}" for rate in entry["passes"])
            out.write(
                f"  {name:<16} {entry['rowsPerSec']:>10,.0f} rows/s  {entry['seconds']:.2f} s"
                f"  (passes: {every})\n"
            )
    out.write(f"  limit            {found['limit']:>10,.0f} rows/s  activity / limit = ")
    out.write(f"{found['activityVsLimit']:.2f}\n")
    if found["profile"]:
        out.write(found["profile"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
