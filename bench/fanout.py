"""6. Fan-out at scale: 100, 500 and 1,000 children in flight at once, per database.

Each level submits ``level / per_request`` requests of ``per_request`` children at once (one
thread per request), children of ``child_secs`` RUNNING time and ``items`` rows each, on one
API and one worker. Reported per level:

- time to all spawned: first POST → the last child's ``started_at`` (its platform run known);
- time to all terminal: first POST → the last request's ``finished_at``;
- history events per child: every workflow of the app's task queue that started in the
  level's window (masters, pollers and their continued runs), from Temporal's visibility;
- CPU seconds per child by process (Temporal, emulator, API, worker, the benchmark);
- the per-child ratios against the first level (the goal: 500 vs 100 ≤ 1.2);
- the engine's floor for as many children (``temporal_floor``: a workflow per child with
  one activity and one signal, nothing else, on the same server right after the level), and
  the level against it: what of the time and CPU is Temporal's own minimum under the design.

Timestamps come from the database the worker wrote, so the benchmark only asks whether
each request is terminal (every half second), not every child's state.

``--profile DIR`` also samples the worker with py-spy during each level (``DIR/worker-<db>-
<children>.txt``, collapsed stacks) and adds the frames that took the most of its busy
samples to the results (``workerProfile``): where the worker's time goes, per level.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, func, select

from bench.floor_workflow import FLOOR_SIGNAL
from bench.scenarios import CpuMeter, calls_by_kind, generator_input, request
from bench.stack import App, Platform
from orchestrator.db.schema import scrape_children, scrape_runs
from orchestrator.domain.ids import orchestrator_workflow_id

log = logging.getLogger("bench.fanout")


@dataclass(frozen=True)
class FanoutPlan:
    levels: tuple[int, ...]  # children in flight at once
    per_request: int  # children per request
    child_secs: float  # each child's RUNNING time, real seconds
    items: int  # rows per child
    timeout_secs: float  # per level

    @staticmethod
    def quick() -> FanoutPlan:
        return FanoutPlan(
            levels=(100, 200), per_request=100, child_secs=3.0, items=100, timeout_secs=180
        )

    @staticmethod
    def full() -> FanoutPlan:
        return FanoutPlan(
            levels=(100, 500, 1000), per_request=100, child_secs=3.0, items=100, timeout_secs=600
        )


def _epoch(value: datetime | None) -> float | None:
    if value is None:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def _history_events(app: App, platform: Platform, since: float) -> dict[str, int]:
    """Workflow runs and their history events on the app's task queue started since then."""

    async def count() -> dict[str, int]:
        from temporalio.client import Client

        client = await Client.connect(
            platform.stack.temporal_address, namespace=platform.stack.namespace
        )
        started = datetime.fromtimestamp(since - 1, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        query = f'TaskQueue="{app.stack.task_queue}" AND StartTime >= "{started}"'
        found = {"workflows": 0, "events": 0, "masterEvents": 0, "pollerEvents": 0}
        async for wf in client.list_workflows(query):
            found["workflows"] += 1
            length = wf.history_length
            if wf.workflow_type == "ScraperOrchestrator":
                # Visibility may not have the length of a master that closed just now yet;
                # the workflow's own description has it.
                described = await client.get_workflow_handle(wf.id, run_id=wf.run_id).describe()
                length = described.history_length
                found["masterEvents"] += length
            found["events"] += length
            if wf.workflow_type in ("PollerWorkflow", "PollerWorkflowV2"):
                found["pollerEvents"] += length
        return found

    return asyncio.run(count())


def _wait_closed(platform: Platform, run_ids: list[str], deadline: float) -> float:
    """When the last master workflow closed (every poller reports before it does)."""

    async def wait() -> float:
        from temporalio.client import Client

        client = await Client.connect(
            platform.stack.temporal_address, namespace=platform.stack.namespace
        )
        last = 0.0
        for run_id in run_ids:
            handle = client.get_workflow_handle(orchestrator_workflow_id(run_id))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"master of {run_id} still running")
            await asyncio.wait_for(handle.result(), timeout=remaining)
            described = await handle.describe()
            if described.close_time is not None:
                last = max(last, described.close_time.timestamp())
        return last

    return asyncio.run(wait())


#: A sample whose innermost frame is one of these is a thread waiting, not working.
IDLE_FRAMES = ("select", "wait (", "get (queue", "_wait_for_tstate_lock", "thread.py:81")


@contextlib.contextmanager
def worker_profile(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy samples of ``pid`` into ``out`` (collapsed stacks) while the block runs."""
    if out is None:
        yield
        return
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    argv = [spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "50"]
    proc = subprocess.Popen([*argv, "--output", str(out)], stdout=subprocess.DEVNULL)  # noqa: S603
    time.sleep(1.0)  # py-spy attaches
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


def profile_summary(path: Path, top: int = 25) -> dict[str, Any]:
    """The frames present in the most busy samples (inclusive share), from py-spy's raw
    output: one line per distinct stack, frames separated by ';', then a count."""
    busy = 0
    inclusive: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if any(idle in frames[-1] for idle in IDLE_FRAMES) or any(
            "thread.py:81" in f for f in frames
        ):
            continue
        busy += int(count)
        for frame in set(frames):
            inclusive[frame] += int(count)
    return {
        "busySamples": busy,
        "top": [
            {"frame": frame, "share": round(n / busy, 3)}
            for frame, n in inclusive.most_common(top)
            if busy and "threading.py" not in frame and "base_events.py" not in frame
        ],
    }


def temporal_floor(platform: Platform, children: int, timeout: float) -> dict[str, Any]:
    """``children`` floor children (bench/floor_workflow.py) on the stack's Temporal server,
    with a worker in this process on a task queue of their own: all started at once, each
    signalled once; seconds to all started and all done, and CPU ms per child of the server
    and of this process (the worker and the client)."""
    from temporalio.client import Client
    from temporalio.worker import Worker

    from bench.floor_workflow import FloorChild, floor_look

    async def run() -> dict[str, Any]:
        client = await Client.connect(
            platform.stack.temporal_address, namespace=platform.stack.namespace
        )
        queue = f"bench-floor-{uuid.uuid4().hex[:8]}"
        async with Worker(
            client,
            task_queue=queue,
            workflows=[FloorChild],
            activities=[floor_look],
            max_concurrent_activities=500,  # as the orchestrator's worker
        ):
            await client.execute_workflow(  # the first workflow task pays for imports
                FloorChild.run,
                "warm",
                id=f"{queue}-warm",
                task_queue=queue,
                start_signal=FLOOR_SIGNAL,
            )
            with CpuMeter(_temporal_pid(platform)) as cpu:
                began = time.perf_counter()
                handles = await asyncio.gather(
                    *(
                        client.start_workflow(
                            FloorChild.run, f"c{i}", id=f"{queue}-{i}", task_queue=queue
                        )
                        for i in range(children)
                    )
                )
                started = time.perf_counter() - began
                await asyncio.gather(*(h.signal(FloorChild.platform_signal) for h in handles))
                await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), timeout)
                done = time.perf_counter() - began
        spent = {"temporal": cpu.spent.get("temporal", 0.0), "worker": cpu.spent["bench"]}
        return {
            "startedSecs": round(started, 3),
            "doneSecs": round(done, 3),
            "cpuMsPerChild": {k: round(1000 * v / children, 1) for k, v in spent.items()},
            "cpuMsPerChildTotal": round(1000 * sum(spent.values()) / children, 1),
        }

    return asyncio.run(run())


def _temporal_pid(platform: Platform) -> dict[str, int]:
    pid = platform.stack.pid("temporal")
    return {} if pid is None else {"temporal": pid}


def fanout_level(
    app: App,
    platform: Platform,
    plan: FanoutPlan,
    children: int,
    tag: str,
    profile: Path | None = None,
) -> dict[str, Any]:
    requests = max(1, children // plan.per_request)
    bodies = [
        request(
            [
                generator_input(plan.items, 500, plan.child_secs, seed=f"{tag}-{r}-{i}")
                for i in range(plan.per_request)
            ]
        )
        for r in range(requests)
    ]
    platform.reset_stats()
    pids = app.component_pids(platform)
    with (
        worker_profile(app.worker_pid, profile),
        CpuMeter(pids) as cpu,
        concurrent.futures.ThreadPoolExecutor(max_workers=requests) as pool,
    ):
        posted = time.time()
        run_ids = list(pool.map(app.submit, bodies))
        accepted = time.time() - posted
        deadline = time.monotonic() + plan.timeout_secs
        pending = set(run_ids)
        while pending:
            if time.monotonic() > deadline:
                stuck = _child_states(app, pending)
                raise TimeoutError(
                    f"fan-out of {children}: {len(pending)} of {requests} requests not terminal "
                    f"after {plan.timeout_secs:.0f} s; their children: {stuck}"
                )
            pending = {rid for rid in pending if not app.run(rid)["terminal"]}
            if pending:
                time.sleep(0.5)
        # A request is terminal once its children are; their pollers then settle usage and
        # report, and the master finalises: the CPU figures wait for all of that too.
        closed = _wait_closed(platform, run_ids, deadline) - posted
    engine = create_engine(app.database_url)
    try:
        with engine.connect() as conn:
            last_start = conn.execute(
                select(func.max(scrape_children.c.started_at)).where(
                    scrape_children.c.run_id.in_(run_ids)
                )
            ).scalar()
            last_end = conn.execute(
                select(func.max(scrape_runs.c.finished_at)).where(scrape_runs.c.id.in_(run_ids))
            ).scalar()
            marks = conn.execute(
                select(
                    scrape_children.c.started_at,
                    scrape_children.c.finished_at,
                    scrape_children.c.usage_settled_at,
                ).where(scrape_children.c.run_id.in_(run_ids))
            ).all()
            states: dict[str, int] = {
                state: count
                for state, count in conn.execute(
                    select(scrape_children.c.state, func.count())
                    .where(scrape_children.c.run_id.in_(run_ids))
                    .group_by(scrape_children.c.state)
                ).all()
            }
    finally:
        engine.dispose()
    history = _history_events(app, platform, posted)
    spawned, ended = _epoch(last_start), _epoch(last_end)
    total = requests * plan.per_request
    cpu_total = sum(v for k, v in cpu.spent.items() if k != "bench")
    found: dict[str, Any] = {
        "children": total,
        "requests": requests,
        "childStates": states,
        "acceptedSecs": round(accepted, 3),
        "spawnedSecs": None if spawned is None else round(spawned - posted, 3),
        "terminalSecs": None if ended is None else round(ended - posted, 3),
        "closedSecs": round(closed, 3),
        "overheadSecs": None if ended is None else round(ended - posted - plan.child_secs, 3),
        "childMarks": _marks(marks, posted),
        "historyEventsPerChild": round(history["events"] / total, 2),
        "masterEventsPerChild": round(history["masterEvents"] / total, 2),
        "pollerEventsPerChild": round(history["pollerEvents"] / total, 2),
        "workflowRuns": history["workflows"],
        "cpuSecs": cpu.spent,
        "cpuSecsPerChild": {k: round(v / total, 4) for k, v in cpu.spent.items()},
        "cpuMsPerChild": round(1000 * cpu_total / total, 1),
        "platformCallsPerChild": {
            k: round(v / total, 2) for k, v in calls_by_kind(platform.stats()).items()
        },
    }
    if profile is not None:
        found["workerProfile"] = profile_summary(profile)
    # The same number of floor children on the same, now idle, server: what the engine alone
    # takes for them, against which the orchestrator's figures are read.
    floor = temporal_floor(platform, total, plan.timeout_secs)
    found["floor"] = floor
    found["vsFloor"] = vs_floor(found, floor)
    return found


def vs_floor(level: dict[str, Any], floor: dict[str, Any]) -> dict[str, Any]:
    """The orchestrator's level against the engine's floor for as many children: spawned vs
    the floor's started, the overhead past the run vs the floor's whole time (its children
    do not run), and CPU per child (Temporal + worker, and every process)."""
    cpu = level["cpuSecsPerChild"]
    engine_ms = 1000 * (cpu.get("temporal", 0.0) + cpu.get("worker", 0.0))
    return {
        "spawned": _ratio(level["spawnedSecs"], floor["startedSecs"]),
        "overhead": _ratio(level["overheadSecs"], floor["doneSecs"]),
        "cpuTemporalWorker": _ratio(engine_ms, floor["cpuMsPerChildTotal"]),
        "cpu": _ratio(level["cpuMsPerChild"], floor["cpuMsPerChildTotal"]),
    }


def _marks(rows: Any, posted: float) -> dict[str, dict[str, float | None]]:
    """p50 and max of each child's milestones, seconds after the first POST."""
    found: dict[str, dict[str, float | None]] = {}
    for i, name in enumerate(("started", "rowsIn", "usageSettled")):
        values = sorted(v - posted for row in rows if (v := _epoch(row[i])) is not None)
        found[name] = {
            "p50": round(values[len(values) // 2], 3) if values else None,
            "max": round(values[-1], 3) if values else None,
        }
    return found


def _ratio(value: float | None, base: float | None) -> float | None:
    if value is None or not base:
        return None
    return round(value / base, 2)


#: Where the logs of a scenario that did not finish are kept (``var/`` is not in git).
FAILED_LOGS = Path(__file__).resolve().parents[1] / "var" / "bench-failed"


def keep_logs(what: str, stacks: dict[str, App | Platform]) -> Path:
    """Copy each stack's process logs to ``FAILED_LOGS/<what>-<time>/<name>``."""
    kept = FAILED_LOGS / f"{what}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    for name, holder in stacks.items():
        shutil.copytree(holder.stack.log_dir, kept / name, dirs_exist_ok=True)
    return kept


def _child_states(app: App, run_ids: set[str]) -> dict[str, int]:
    """How many children of these requests are in each state (what a stuck level waits on)."""
    states = Counter(child["state"] for run_id in run_ids for child in app.run(run_id)["children"])
    return dict(sorted(states.items()))


def fanout_levels(
    app: App, platform: Platform, plan: FanoutPlan, label: str, profile_dir: Path | None = None
) -> dict[str, Any]:
    """Every level on one app stack, smallest first, with per-child ratios to the first."""
    # The first request pays for imports, connections and the first workflow tasks.
    app.wait_terminal(
        app.submit(request([generator_input(plan.items, 500, 0.5, seed=f"{label}-warm")])),
        timeout=120,
    )
    levels: list[dict[str, Any]] = []
    found: dict[str, Any] = {"plan": asdict(plan), "levels": levels}
    for children in plan.levels:
        log.info("fan-out %s: %d children in flight", label, children)
        out = None if profile_dir is None else profile_dir / f"worker-{label}-{children}.txt"
        try:
            levels.append(fanout_level(app, platform, plan, children, f"{label}-{children}", out))
        except TimeoutError as exc:
            # The levels before it stand; the bigger ones would only wait longer. The stacks'
            # logs outlive the run's temporary directory, to say where the children waited.
            kept = keep_logs(f"fanout-{label}-{children}", {"app": app, "platform": platform})
            found["failed"] = f"{exc} (logs kept in {kept})"
            log.error("fan-out %s stopped: %s", label, found["failed"])
            break
    base = levels[0] if levels else {}
    for level in levels:
        per = level["children"]
        b = base["children"]
        level["vsFirstPerChild"] = {
            "spawned": _ratio(
                level["spawnedSecs"] and level["spawnedSecs"] / per,
                base["spawnedSecs"] and base["spawnedSecs"] / b,
            ),
            "overhead": _ratio(
                level["overheadSecs"] and level["overheadSecs"] / per,
                base["overheadSecs"] and base["overheadSecs"] / b,
            ),
            "cpu": _ratio(level["cpuMsPerChild"], base["cpuMsPerChild"]),
            "historyEvents": _ratio(level["historyEventsPerChild"], base["historyEventsPerChild"]),
        }
        # The engine's own floor, scaled the same way: how flat it is itself on this machine.
        floor, first = level["floor"], base["floor"]
        level["floorVsFirstPerChild"] = {
            "started": _ratio(floor["startedSecs"] / per, first["startedSecs"] / b),
            "done": _ratio(floor["doneSecs"] / per, first["doneSecs"] / b),
            "cpu": _ratio(floor["cpuMsPerChildTotal"], first["cpuMsPerChildTotal"]),
        }
    return found


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.fanout [--quick] [--db sqlite postgresql] [--levels N…]``: the
    fan-out scenario alone, printed as JSON."""
    import argparse
    import json
    import tempfile
    from contextlib import ExitStack

    from bench.stack import app_stack, platform_stack, postgres_database

    parser = argparse.ArgumentParser(prog="python -m bench.fanout", description=main.__doc__)
    parser.add_argument("--quick", action="store_true", help="the quick run's smaller levels")
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--levels", type=int, nargs="+", help="children in flight per level")
    parser.add_argument("--profile", type=Path, help="profile the worker into this directory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    plan = FanoutPlan.quick() if args.quick else FanoutPlan.full()
    if args.levels:
        plan = FanoutPlan(**{**asdict(plan), "levels": tuple(args.levels)})
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-fanout-") as tmp, platform_stack(Path(tmp)) as p:
        for db in args.db:
            with ExitStack() as stack:
                if db == "sqlite":
                    url = f"sqlite:///{tmp}/fanout.db"
                else:
                    url = stack.enter_context(postgres_database("fanout"))
                app = stack.enter_context(app_stack(p, Path(tmp), url, f"fanout-{db}"))
                if args.profile is not None:
                    args.profile.mkdir(parents=True, exist_ok=True)
                found[db] = fanout_levels(app, p, plan, db, args.profile)
    sys.stdout.write(json.dumps(found, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
