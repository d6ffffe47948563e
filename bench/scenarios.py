"""The orchestrator's scenarios: ingest throughput, completion latency, fan-out, platform calls.

Every scenario drives the real stack through its public surfaces only: the API (as a caller),
the emulator's platform API (for a run's ``finishedAt``) and its control API (stats, faults),
and ``/proc`` for the worker's memory. Every wait is bounded in time and every loop in count.

Trade-off: timings that the stack records itself (a child's ``finishedAt``, written in the
transaction that stores its last state) are preferred to timings observed by polling, which
add the polling period; where "visible through the API" is the point (completion latency),
both are reported.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from typing import Any, Final

from bench.stack import (
    TIME_SCALE,
    App,
    Platform,
    RssSampler,
    cpu_seconds,
    parse_time,
    read_status_kib,
)

GENERATOR: Final = "ultron-generator"
PAGE_SIZE: Final = 1000
#: Event kinds that stand for one platform call each.
CALL_EVENTS: Final = (
    "child.spawn_attempt",
    "child.spawn_lookup",
    "child.poll",
    "child.ingest_page",
)


def generator_input(items: int, item_bytes: int, real_secs: float, seed: str) -> dict[str, Any]:
    """A generator input whose RUNNING phase lasts ``real_secs`` wall-clock seconds."""
    return {
        "items": items,
        "itemBytes": item_bytes,
        "durationSecs": round(real_secs / TIME_SCALE, 3),
        "seed": seed,
    }


def request(children: list[dict[str, Any]], workspace: str = "ws_bench") -> dict[str, Any]:
    return {
        "workspaceId": workspace,
        "runs": [{"actor": GENERATOR, "input": child} for child in children],
    }


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def call_kind(route: str) -> str:
    """The kind of a platform call from the emulator's route template."""
    method, _, path = route.partition(" ")
    if method == "POST" and path.endswith("/runs"):
        return "start"
    if path.endswith("/items"):
        return "datasetPages"
    if method == "GET" and path.endswith("{runId}"):
        return "status"
    return "other"


def calls_by_kind(stats: dict[str, Any]) -> dict[str, int]:
    kinds: Counter[str] = Counter()
    for route, count in stats.get("routes", {}).items():
        kinds[call_kind(route)] += int(count)
    return {k: kinds.get(k, 0) for k in ("start", "status", "datasetPages", "other")}


def event_calls(events: list[dict[str, Any]]) -> dict[str, int]:
    kinds = Counter(e["kind"] for e in events)
    return {kind: kinds.get(kind, 0) for kind in CALL_EVENTS}


class CpuMeter:
    """CPU seconds each stack component (and this process) spent between enter and exit."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = {**pids, "bench": os.getpid()}
        self.spent: dict[str, float] = {}
        self._start: dict[str, float | None] = {}

    def __enter__(self) -> CpuMeter:
        self._start = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        return self

    def __exit__(self, *exc: object) -> None:
        for name, pid in self.pids.items():
            before, after = self._start.get(name), cpu_seconds(pid)
            if before is not None and after is not None:
                self.spent[name] = round(after - before, 2)


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def wait_usage_settled(app: App, run_id: str, timeout: float = 60.0) -> int:
    """The platform reads the child's usage settling took, once its event is there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in app.events(run_id):
            if event["kind"] == "child.usage_settled":
                return int((event.get("data") or {}).get("reads", 0))
        time.sleep(0.5)
    raise TimeoutError(f"the usage of {run_id} did not settle within {timeout:.0f} s")


# -- 1. ingest throughput ---------------------------------------------------------------------


def ingest(app: App, platform: Platform, items: int, item_bytes: int) -> dict[str, Any]:
    """One child of ``items`` rows: SUCCEEDED → all rows stored, and the worker's memory."""
    pid = app.worker_pid
    rss_before = read_status_kib(pid, "VmRSS") or 0
    platform.reset_stats()
    run_input = generator_input(items, item_bytes, 0.5, seed=f"bench-{items}")
    timeout = 60 + items / 5_000
    with RssSampler(pid) as sampler, CpuMeter(app.component_pids(platform)) as cpu:
        posted = time.time()
        run_id = app.submit(request([run_input]))
        run = app.wait_terminal(run_id, timeout=timeout, interval=0.5)
    child = run["children"][0]
    if child["state"] != "succeeded" or child["itemsIngested"] != items:
        raise RuntimeError(
            f"ingest of {items}: child ended {child['state']} with {child['itemsIngested']} items"
        )
    # Settling the run's usage reads it again after the end (issue 11): wait for that to
    # finish so the count is not a race, and count those reads apart from the follow path.
    settle_reads = wait_usage_settled(app, run_id)
    # Counted before our own read of the run below, which is not the orchestrator's.
    raw = platform.stats()
    calls = calls_by_kind(raw)
    calls["status"] -= settle_reads
    platform_routes = raw.get("routes", {})
    platform_run = platform.platform_run(child["platformRunId"])
    finished = parse_time(platform_run["finishedAt"])
    stored = parse_time(child["finishedAt"])
    events = app.events(run_id)
    ingesting = next(
        (
            parse_time(e["createdAt"])
            for e in events
            if e["kind"] == "child.state" and (e.get("data") or {}).get("to") == "ingesting"
        ),
        None,
    )
    seconds = stored - finished
    ingest_seconds = stored - ingesting if ingesting is not None else None
    return {
        "items": items,
        "runId": run_id,
        "seconds": round(seconds, 4),
        "rowsPerSec": round(items / seconds, 1),
        "detectSeconds": _round(ingesting - finished if ingesting is not None else None),
        "ingestSeconds": _round(ingest_seconds, 4),
        "ingestRowsPerSec": _round(items / ingest_seconds if ingest_seconds else None, 1),
        "postToStoredSeconds": round(stored - posted, 3),
        "workerRssBeforeMiB": round(rss_before / 1024, 1),
        "workerRssPeakMiB": round(sampler.peak_kib / 1024, 1),
        "workerHwmMiB": round((read_status_kib(pid, "VmHWM") or 0) / 1024, 1),
        "rssSamples": sampler.samples,
        "cpuSecs": cpu.spent,
        "platformCalls": calls,
        "usageSettleReads": settle_reads,
        "platformRoutes": platform_routes,
        "eventCalls": event_calls(events),
        "callBound": 3 + math.ceil(items / PAGE_SIZE),
    }


# -- 2. completion latency --------------------------------------------------------------------


def latency(
    app: App,
    platform: Platform,
    children: int,
    spread_secs: float,
    *,
    webhooks: bool,
    items: int = 100,
) -> dict[str, Any]:
    """``children`` runs ending over ``spread_secs``: platform finishedAt → rows visible."""
    inputs = [
        generator_input(
            items, 500, 1 + spread_secs * i / max(children - 1, 1), seed=f"lat-{webhooks}-{i}"
        )
        for i in range(children)
    ]
    platform.reset_stats()
    if not webhooks:
        platform.drop_webhooks()
    seen: dict[str, float] = {}
    try:
        run_id = app.submit(request(inputs))
        deadline = time.monotonic() + spread_secs + 90
        run: dict[str, Any] = {}
        while time.monotonic() < deadline:
            run = app.run(run_id)
            now = time.time()
            for child in run["children"]:
                if child["id"] not in seen and child["itemsIngested"] >= items:
                    seen[child["id"]] = now
            if run["terminal"]:
                break
            time.sleep(0.05)
        else:
            raise TimeoutError(f"latency run {run_id} did not end in time")
    finally:
        if not webhooks:
            platform.clear_faults()
    stats = platform.stats()
    observed: list[float] = []
    recorded: list[float] = []
    for child in run["children"]:
        finished = parse_time(platform.platform_run(child["platformRunId"])["finishedAt"])
        if child["id"] in seen:
            observed.append(seen[child["id"]] - finished)
        if child["finishedAt"]:
            recorded.append(parse_time(child["finishedAt"]) - finished)
    polls = event_calls(app.events(run_id))["child.poll"]
    return {
        "webhooks": webhooks,
        "children": children,
        "spreadSecs": spread_secs,
        "state": run["state"],
        "visible": len(observed),
        "p50": _round(percentile(observed, 50)),
        "p95": _round(percentile(observed, 95)),
        "max": _round(max(observed) if observed else None),
        "recordedP50": _round(percentile(recorded, 50)),
        "recordedP95": _round(percentile(recorded, 95)),
        "recordedMax": _round(max(recorded) if recorded else None),
        "pollsPerChild": round(polls / children, 2),
        "webhookCalls": stats.get("webhookCalls", {}),
        "platformCallsPerChild": {
            k: round(v / children, 2) for k, v in calls_by_kind(stats).items()
        },
    }


# -- 3. fan-out (and 4. platform calls per child) ----------------------------------------------


def fanout(app: App, platform: Platform, children: int, items: int = 100) -> dict[str, Any]:
    """One request of ``children`` runs: POST → all spawned → all succeeded."""
    inputs = [generator_input(items, 500, 3.0, seed=f"fan-{i}") for i in range(children)]
    platform.reset_stats()
    cpu = CpuMeter(app.component_pids(platform)).__enter__()
    posted = time.time()
    run_id = app.submit(request(inputs))
    spawned_at: float | None = None
    run: dict[str, Any] = {}
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        run = app.run(run_id)
        now = time.time()
        if spawned_at is None and all(
            c["platformRunId"] and c["state"] not in ("pending", "spawning")
            for c in run["children"]
        ):
            spawned_at = now
        if run["terminal"]:
            break
        time.sleep(0.1)
    else:
        raise TimeoutError(f"fan-out run {run_id} did not end in time")
    cpu.__exit__()
    ended = parse_time(run["finishedAt"]) if run.get("finishedAt") else time.time()
    raw = platform.stats()
    calls = calls_by_kind(raw)
    events = app.events(run_id)
    ev = event_calls(events)
    per_child = Counter(e["childId"] for e in events if e["kind"] in CALL_EVENTS)
    return {
        "children": children,
        "state": run["state"],
        "succeeded": sum(1 for c in run["children"] if c["state"] == "succeeded"),
        "spawnedSecs": _round(spawned_at - posted if spawned_at else None),
        "succeededSecs": round(ended - posted, 3),
        "cpuSecs": cpu.spent,
        "platformCalls": calls,
        "callsPerChild": {k: round(v / children, 2) for k, v in calls.items()},
        "platformRoutes": raw.get("routes", {}),
        "eventCallsPerChild": {k: round(v / children, 2) for k, v in ev.items()},
        "maxEventCallsOneChild": max(per_child.values(), default=0),
        "callBound": 3 + math.ceil(items / PAGE_SIZE),
    }
