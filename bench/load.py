"""5. Load: a bounded open-loop load against an account whose concurrency is lower than demand.

Requests of a few short children are fed at a fixed rate, whatever the answers (open loop:
a slow 202 does not slow the feed), into an emulator whose concurrent-run cap
(``APIFY_EMULATOR_MAX_CONCURRENT_RUNS``) is lower than the load asks for. Beside that burst,
a second workspace trickles a one-child request every few seconds; the same trickle is also
run alone first, on the idle stack, so its time-to-terminal under load has a yardstick.
Reported per stack (1 worker, then 3 workers; one API, PostgreSQL):

- accepted-request latency: POST /runs → 202, p50 / p95 / max (client side);
- time to all terminal: first POST → the last request's ``finishedAt``;
- platform calls: the emulator's counters by kind and by HTTP status (402s are refused
  starts), less the benchmark's own slot samples;
- slot utilisation: active runs on the emulator, sampled every 0.5 s, mean and peak over
  the window, divided by the cap;
- fairness: the trickler's POST → ``finishedAt``, alone and under load, and the ratio.

The capped emulator is an emulator of its own (on the benchmark's Temporal server), so the
other scenarios keep their uncapped one. Every wait is bounded.

Trade-off: the benchmark samples slots through the platform API (``GET /v2/actor-runs``),
which the emulator counts; the samples are subtracted from that route rather than adding a
control endpoint to the emulator for it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import secrets
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from threading import Event, Lock, Thread
from typing import Any, Final

import httpx

from bench.scenarios import CpuMeter, calls_by_kind, generator_input, percentile, request
from bench.stack import (
    EMULATOR_ENV,
    EMULATOR_TOKEN,
    TIME_SCALE,
    App,
    Platform,
    app_stack,
    free_ports,
    parse_time,
    postgres_database,
)
from orchestrator.cli.devstack import DevStack, StackPorts

log = logging.getLogger("bench.load")

#: Platform statuses of a run that holds one of the account's concurrent-run slots.
ACTIVE_STATUSES: Final = "READY,RUNNING,TIMING-OUT,ABORTING"
SAMPLE_ROUTE: Final = "GET /v2/actor-runs"
SAMPLE_INTERVAL_SECS: Final = 0.5
BURST_WORKSPACE: Final = "ws_burst"
TRICKLE_WORKSPACE: Final = "ws_trickle"
ALONE_EVERY_SECS: Final = 1.0


@dataclass(frozen=True)
class LoadPlan:
    requests: int  # the burst workspace's requests
    children: int  # children per burst request
    rate: float  # burst requests per second
    cap: int  # the emulator's concurrent-run cap
    child_secs: float  # each child's RUNNING time, real seconds
    items: int  # rows per child
    trickle_requests: int  # the trickling workspace's one-child requests
    trickle_every_secs: float
    workers: tuple[int, ...]  # one load per worker count

    # Runs last long against the orchestrator's own work per child (a few activities and
    # workflow tasks), so the account's cap, not the orchestrator, bounds the load.

    @staticmethod
    def quick() -> LoadPlan:
        # A smoke-sized load: the whole quick run has two minutes.
        return LoadPlan(
            requests=3,
            children=3,
            rate=3.0,
            cap=3,
            child_secs=1.0,
            items=20,
            trickle_requests=1,
            trickle_every_secs=1.0,
            workers=(1, 3),
        )

    @staticmethod
    def full() -> LoadPlan:
        # 120 children of 6 s against 8 slots need at least 90 s per worker count; the
        # issue's example (900 children) would take over 10 minutes each at such a cap.
        return LoadPlan(
            requests=40,
            children=3,
            rate=1.0,
            cap=8,
            child_secs=6.0,
            items=100,
            trickle_requests=6,
            trickle_every_secs=8.0,
            workers=(1, 3),
        )

    @property
    def demand_runs(self) -> float:
        """Concurrent runs the burst asks for at its rate (Little's law, RUNNING time only)."""
        return self.rate * self.children * self.child_secs


@contextlib.contextmanager
def capped_platform(main: Platform, var_dir: Path, cap: int) -> Iterator[Platform]:
    """An emulator capped at ``cap`` concurrent runs, beside the benchmark's Temporal."""
    (emulator_port, api_port) = free_ports(2)
    base = main.stack.ports
    stack = DevStack(
        var_dir / "platform-capped",
        StackPorts(
            temporal=base.temporal,
            temporal_ui=base.temporal_ui,
            emulator=emulator_port,
            api=api_port,
        ),
        extra_env=EMULATOR_ENV | {"APIFY_EMULATOR_MAX_CONCURRENT_RUNS": str(cap)},
        emulator_time_scale=TIME_SCALE,
        temporal_ui=False,
        components=("emulator",),
    )
    with stack:
        client = httpx.Client(
            base_url=stack.urls["emulator"],
            timeout=60,
            headers={"Authorization": f"Bearer {EMULATOR_TOKEN}"},
        )
        with client:
            yield Platform(stack=stack, emulator=client)


class SlotSampler:
    """Counts the platform's active runs every ``interval`` seconds on a thread."""

    def __init__(self, url: str, interval: float = SAMPLE_INTERVAL_SECS) -> None:
        self.client = httpx.Client(
            base_url=url, timeout=10, headers={"Authorization": f"Bearer {EMULATOR_TOKEN}"}
        )
        self.interval = interval
        self.samples: list[tuple[float, int]] = []
        self.calls = 0
        self._stop = Event()
        self._thread = Thread(target=self._run, name="slot-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.calls += 1
                reply = self.client.get(
                    "/v2/actor-runs", params={"status": ACTIVE_STATUSES, "limit": 1}
                )
                self.samples.append((time.time(), int(reply.json()["data"]["total"])))
            except (httpx.HTTPError, KeyError, ValueError):
                log.debug("slot sample failed", exc_info=True)
            self._stop.wait(self.interval)

    def __enter__(self) -> SlotSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.client.close()

    def between(self, start: float, end: float) -> list[int]:
        return [n for t, n in self.samples if start <= t <= end]


@dataclass
class Sent:
    workspace: str
    scheduled: float  # wall clock
    sent: float = 0.0
    accepted: float | None = None
    run_id: str | None = None
    error: str | None = None

    @property
    def latency(self) -> float | None:
        return None if self.accepted is None else self.accepted - self.sent


class Feeder:
    """Sends each request at its scheduled time on a thread pool (open loop)."""

    def __init__(self, app: App, pool_size: int = 16) -> None:
        self.url = str(app.api.base_url)
        self.headers = dict(app.api.headers)
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=pool_size)
        self.clients: dict[int, httpx.Client] = {}
        self.lock = Lock()
        self.sent: list[Sent] = []

    def _client(self) -> httpx.Client:
        from threading import get_ident

        with self.lock:
            client = self.clients.get(get_ident())
            if client is None:
                client = httpx.Client(base_url=self.url, timeout=60, headers=self.headers)
                self.clients[get_ident()] = client
            return client

    def _send(self, entry: Sent, body: dict[str, Any]) -> None:
        entry.sent = time.time()
        try:
            response = self._client().post("/runs", json=body)
        except httpx.HTTPError as exc:
            entry.error = repr(exc)
            return
        if response.status_code == 202:
            entry.accepted = time.time()
            entry.run_id = response.json()["runId"]
        else:
            entry.error = f"{response.status_code}: {response.text[:200]}"

    def feed(self, schedule: list[tuple[float, dict[str, Any]]]) -> list[Sent]:
        """``(wall-clock time, body)`` pairs, in time order; waits until every POST answered."""
        futures = []
        batch: list[Sent] = []
        for at, body in schedule:
            delay = at - time.time()
            if delay > 0:
                time.sleep(delay)
            entry = Sent(workspace=body["workspaceId"], scheduled=at)
            batch.append(entry)
            futures.append(self.pool.submit(self._send, entry, body))
        for future in futures:
            future.result()
        self.sent += batch
        return batch

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        for client in self.clients.values():
            client.close()


def _burst_body(plan: LoadPlan, i: int, tag: str) -> dict[str, Any]:
    children = [
        generator_input(plan.items, 500, plan.child_secs, seed=f"load-{tag}-{i}-{c}")
        for c in range(plan.children)
    ]
    return request(children, workspace=BURST_WORKSPACE)


def _trickle_body(plan: LoadPlan, i: int, tag: str) -> dict[str, Any]:
    child = generator_input(plan.items, 500, plan.child_secs, seed=f"trickle-{tag}-{i}")
    return request([child], workspace=TRICKLE_WORKSPACE)


def _wait_terminal(app: App, run_ids: list[str], timeout: float) -> dict[str, dict[str, Any]]:
    """Every run's summary once all are terminal (listing the workspaces, one call a second)."""
    wanted = set(run_ids)
    deadline = time.monotonic() + timeout
    while True:
        found: dict[str, dict[str, Any]] = {}
        for workspace in (BURST_WORKSPACE, TRICKLE_WORKSPACE):
            cursor: str | None = None
            for _ in range(100):
                params: dict[str, Any] = {"workspaceId": workspace, "limit": 500}
                if cursor:
                    params["cursor"] = cursor
                page = app.api.get("/runs", params=params)
                page.raise_for_status()
                body = page.json()
                found.update({r["id"]: r for r in body["runs"] if r["id"] in wanted})
                cursor = body["nextCursor"]
                if cursor is None:
                    break
        if len(found) == len(wanted) and all(r["terminal"] for r in found.values()):
            return found
        if time.monotonic() > deadline:
            ended = sum(1 for r in found.values() if r["terminal"])
            raise TimeoutError(f"load: {ended}/{len(wanted)} requests terminal after {timeout} s")
        time.sleep(1.0)


def _durations(entries: list[Sent], runs: dict[str, dict[str, Any]]) -> list[float]:
    """POST → the request's finishedAt, per request."""
    return [
        parse_time(runs[e.run_id]["finishedAt"]) - e.sent
        for e in entries
        if e.run_id and runs[e.run_id].get("finishedAt")
    ]


def _stats(values: list[float]) -> dict[str, float | None]:
    return {
        "p50": _r(percentile(values, 50)),
        "p95": _r(percentile(values, 95)),
        "max": _r(max(values) if values else None),
    }


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def trickle_alone(app: App, plan: LoadPlan, tag: str) -> list[float]:
    """The trickle's requests on the idle stack: POST → finishedAt. Fed a second apart
    rather than at the trickle's pace: alone, one-child requests hardly overlap anyway."""
    feeder = Feeder(app, pool_size=4)
    try:
        start = time.time() + 0.2
        every = min(plan.trickle_every_secs, ALONE_EVERY_SECS)
        schedule = [
            (start + i * every, _trickle_body(plan, i, f"alone-{tag}"))
            for i in range(plan.trickle_requests)
        ]
        sent = feeder.feed(schedule)
    finally:
        feeder.close()
    run_ids = [e.run_id for e in sent if e.run_id]
    if len(run_ids) != len(sent):
        raise RuntimeError(f"trickle alone: refused: {[e.error for e in sent if e.error]}")
    runs = _wait_terminal(app, run_ids, timeout=120)
    return _durations(sent, runs)


def load(
    app: App, capped: Platform, plan: LoadPlan, workers: int, temporal_pid: int | None = None
) -> dict[str, Any]:
    """The open-loop load on one stack; see the module docstring."""
    tag = f"w{workers}-{secrets.token_hex(2)}"
    alone = trickle_alone(app, plan, tag)
    capped.reset_stats()
    start = time.time() + 0.5
    schedule = [(start + i / plan.rate, _burst_body(plan, i, tag)) for i in range(plan.requests)]
    schedule += [
        (start + (i + 0.5) * plan.trickle_every_secs, _trickle_body(plan, i, f"load-{tag}"))
        for i in range(plan.trickle_requests)
    ]
    schedule.sort(key=lambda pair: pair[0])
    feeder = Feeder(app)
    timeout = 120 + plan.requests * plan.children * plan.child_secs
    with (
        SlotSampler(capped.emulator_url) as sampler,
        CpuMeter(_pids(app, capped, temporal_pid)) as cpu,
    ):
        try:
            sent = feeder.feed(schedule)
        finally:
            feeder.close()
        fed_until = time.time()
        refused = [e.error for e in sent if e.run_id is None]
        if refused:
            raise RuntimeError(f"load: {len(refused)} requests refused, e.g. {refused[0]}")
        runs = _wait_terminal(app, [e.run_id for e in sent if e.run_id], timeout=timeout)
    ended = max(parse_time(r["finishedAt"]) for r in runs.values() if r.get("finishedAt"))
    stats = capped.stats()
    calls = calls_by_kind(stats)
    routes: dict[str, int] = dict(stats.get("routes", {}))
    # The samples are the benchmark's calls, not the orchestrator's.
    routes[SAMPLE_ROUTE] = routes.get(SAMPLE_ROUTE, 0) - sampler.calls
    calls["other"] -= sampler.calls
    statuses = {str(k): int(v) for k, v in stats.get("statuses", {}).items()}
    statuses["200"] = statuses.get("200", 0) - sampler.calls
    active = sampler.between(start, ended)
    burst = [e for e in sent if e.workspace == BURST_WORKSPACE]
    trickle = [e for e in sent if e.workspace == TRICKLE_WORKSPACE]
    under_load = _durations(trickle, runs)
    states = Counter(r["state"] for r in runs.values())
    children = plan.requests * plan.children + plan.trickle_requests
    alone_p50 = percentile(alone, 50)
    load_p50 = percentile(under_load, 50)
    return {
        "workers": workers,
        "requests": len(sent),
        "children": children,
        "states": dict(states),
        "feedSecs": round(fed_until - start, 2),
        "acceptLatency": _stats([e.latency for e in sent if e.latency is not None]),
        "allTerminalSecs": round(ended - start, 2),
        "burstToTerminal": _stats(_durations(burst, runs)),
        "platformCalls": calls,
        "platformCallsPerChild": {k: round(v / children, 2) for k, v in calls.items()},
        "platformStatuses": statuses,
        "refusedStarts": statuses.get("402", 0),
        "platformRoutes": routes,
        "slots": {
            "cap": plan.cap,
            "samples": len(active),
            "mean": _r(sum(active) / len(active) if active else None, 2),
            "peak": max(active, default=0),
            "utilisation": _r(sum(active) / len(active) / plan.cap if active else None, 2),
        },
        "trickle": {
            "alone": _stats(alone),
            "underLoad": _stats(under_load),
            "slowdownP50": _r(load_p50 / alone_p50 if load_p50 and alone_p50 else None, 2),
        },
        "cpuSecs": cpu.spent,
    }


def _pids(app: App, capped: Platform, temporal_pid: int | None) -> dict[str, int]:
    found: dict[str, int] = {} if temporal_pid is None else {"temporal": temporal_pid}
    for stack in (app.stack, capped.stack):
        for name in stack.instances:
            pid = stack.pid(name)
            if pid is not None:
                found[name] = pid
    return found


def run_load(main: Platform, var_dir: Path, plan: LoadPlan) -> dict[str, Any]:
    """The load for each worker count (ascending) on one app stack: PostgreSQL, one API, and
    workers added between the loads (starting a second stack would cost more than the
    quick run can spend)."""
    found: dict[str, Any] = {"plan": asdict(plan), "demandRuns": plan.demand_runs, "runs": []}
    counts = sorted(plan.workers)
    with (
        capped_platform(main, var_dir, plan.cap) as capped,
        postgres_database("load") as url,
        app_stack(capped, var_dir, url, "load", workers=counts[-1], start_workers=counts[0]) as app,
    ):
        # The first request pays for imports, connections and the first workflow tasks.
        app.wait_terminal(app.submit(_trickle_body(plan, 0, "warm-up")), timeout=120)
        for workers in counts:
            app.start_workers(workers)
            log.info("load: %d requests x %d children, %d worker(s)", plan.requests,
                     plan.children, workers)  # fmt: skip
            found["runs"].append(load(app, capped, plan, workers, main.stack.pid("temporal")))
    return found


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.load [--quick]``: the load scenario alone, printed as JSON."""
    import argparse
    import json
    import sys
    import tempfile

    from bench.stack import platform_stack

    parser = argparse.ArgumentParser(prog="python -m bench.load", description=main.__doc__)
    parser.add_argument("--quick", action="store_true", help="the quick run's smaller load")
    parser.add_argument("--workers", type=int, nargs="+", help="worker counts (default 1 3)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    plan = LoadPlan.quick() if args.quick else LoadPlan.full()
    if args.workers:
        plan = LoadPlan(**{**asdict(plan), "workers": tuple(args.workers)})
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp, platform_stack(Path(tmp)) as p:
        found = run_load(p, Path(tmp), plan)
    sys.stdout.write(json.dumps(found, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
