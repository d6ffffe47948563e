"""Scale-out (issue 14, point 4): 3 workers and 2 API processes on one Temporal and PostgreSQL.

One stack for the module (``DevStack(apis=2, workers=3)``) on a fresh PostgreSQL database.
The tests show that work spreads over the workers, and that a worker killed with SIGKILL in
the middle of a 200k-row ingest, or an API process killed in the middle of a burst of
submissions (clients retrying with the same ``Idempotency-Key`` on the other API), leaves
every request terminal with exactly its rows, one platform run per child and nothing left
running on the platform.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import secrets
import socket
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from bench.stack import free_ports
from sqlalchemy import create_engine, text
from temporalio.client import Client

from orchestrator.cli.devstack import DevStack, StackPorts
from orchestrator.domain.admission import Snapshot
from orchestrator.domain.ids import orchestrator_workflow_id, poller_workflow_id
from orchestrator.service.admission import admission_snapshot
from tests.conftest import fresh_postgres_database
from tests.support.waiting import eventually

from .conftest import E2E_EMULATOR_TIME_SCALE, E2E_ENV
from .support import api_client, emulator_client, event_kinds, generator, platform_run_count

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

T = TypeVar("T")

WORKERS = 3
APIS = 2
#: Platform statuses of a run that is not over (it holds one of the account's slots).
ACTIVE_STATUSES = "READY,RUNNING,TIMING-OUT,ABORTING"
BIG_ROWS = 200_000

LEADGEN = {
    "actor": "ultron-leadgen",
    "input": {
        "brief": {"product": "payroll software", "targetCount": 15},
        "icp": {"industries": ["Retail"], "regions": ["Europe"], "companySize": "50-500"},
    },
}


def stack_ports(apis: int) -> StackPorts:
    """Free ports, the API's followed by ``apis - 1`` more free ones (api, api + 1, …)."""
    temporal, temporal_ui, emulator = free_ports(3)
    for _ in range(100):
        (base,) = free_ports(1)
        if base + apis <= 65535 and all(_free(base + i) for i in range(1, apis)):
            return StackPorts(
                temporal=temporal, temporal_ui=temporal_ui, emulator=emulator, api=base
            )
    raise RuntimeError("no run of consecutive free ports for the API processes")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class Scaled:
    """The module's stack and what the tests read besides its HTTP APIs."""

    stack: DevStack
    database_url: str

    def worker_of(self, identity: str) -> str:
        """The worker instance whose Temporal identity (``pid@host``) this is."""
        pid = int(identity.split("@", 1)[0])
        for name in self.stack.instances_of("worker"):
            if self.stack.pid(name) == pid:
                return name
        return f"gone:{pid}"  # a worker that was killed (and restarted) since


@pytest.fixture(scope="module")
def scaled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scaled]:
    with fresh_postgres_database() as url:
        stack = DevStack(
            tmp_path_factory.mktemp("scale-out"),
            stack_ports(APIS),
            extra_env=E2E_ENV
            | {
                "ORCHESTRATOR_DATABASE_URL": url,
                # A request stored by an API killed before it started its workflow is
                # started by the reconciler: soon, so the burst test ends in seconds.
                "ORCHESTRATOR_RECONCILE_INTERVAL_SECONDS": "3",
            },
            emulator_time_scale=E2E_EMULATOR_TIME_SCALE,
            temporal_ui=False,
            apis=APIS,
            workers=WORKERS,
            startup_timeout=120,
        )
        with stack:
            yield Scaled(stack, url)


@pytest.fixture
def emulator(scaled: Scaled) -> Iterator[httpx.Client]:
    with emulator_client(scaled.stack) as client:
        client.delete("/_emulator/faults").raise_for_status()
        yield client


@pytest.fixture(autouse=True)
def every_worker_and_api_running(scaled: Scaled) -> Iterator[None]:
    """Each test starts with the whole stack up, whatever the previous one killed."""
    for name in scaled.stack.instances:
        if not scaled.stack.is_running(name):
            scaled.stack.start_component(name)
    yield


def run_async(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine on a private loop in a helper thread (pytest-asyncio owns this one)."""

    async def guarded() -> T:
        return await factory()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, guarded()).result()


def assert_no_leaked_capacity(emulator: httpx.Client, stack: DevStack) -> None:
    """Nothing holds a capacity slot once every request has ended: the platform has no run
    that is not over (READY, RUNNING, TIMING-OUT, ABORTING), and the admission workflow
    holds no slot and has no child waiting (its releases follow the ends by a signal)."""
    active = emulator.get("/v2/actor-runs", params={"status": ACTIVE_STATUSES, "limit": 10})
    active.raise_for_status()
    data = active.json()["data"]
    assert data["total"] == 0, f"runs still active on the platform: {data['items']}"

    async def snapshot() -> Snapshot:
        client = await Client.connect(stack.temporal_address, namespace=stack.namespace)
        return await admission_snapshot(client, stack.task_queue)

    def released() -> Snapshot | None:
        snap = run_async(snapshot)
        return snap if snap.used_runs == 0 and snap.waiting == 0 else None

    snap = eventually(released, timeout=60, interval=1, description="every slot released")
    assert snap is not None and snap.known and snap.used_memory_mb == 0


def wait_all_terminal(
    api: httpx.Client, run_ids: list[str], timeout: float
) -> list[dict[str, Any]]:
    def all_ended() -> list[dict[str, Any]] | None:
        runs = [api.get(f"/runs/{run_id}").json() for run_id in run_ids]
        return runs if all(r["terminal"] for r in runs) else None

    runs = eventually(all_ended, timeout=timeout, interval=1, description="every request to end")
    assert runs is not None
    return runs


def stored_rows(database_url: str, child: str) -> tuple[int, int, int, int]:
    """count, distinct item indexes, min and max index of a child's rows in PostgreSQL."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT count(*), count(DISTINCT item_index), min(item_index), "
                    "max(item_index) FROM scrape_items WHERE child_id = :c"
                ),
                {"c": child},
            ).one()
    finally:
        engine.dispose()
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


async def activity_workers(address: str, workflow_ids: list[str]) -> list[str]:
    """The identity of the worker that started each activity task of these workflows, once
    each has closed: a request is terminal when its rows are in, while its pollers may still
    be settling the usage in the activity that ingested, and Temporal records an activity's
    start only with its end."""
    client = await Client.connect(address)
    identities: list[str] = []
    for workflow_id in workflow_ids:
        handle = client.get_workflow_handle(workflow_id)
        await asyncio.wait_for(handle.result(), timeout=120)
        history = await handle.fetch_history()
        identities += [
            event.activity_task_started_event_attributes.identity
            for event in history.events
            if event.HasField("activity_task_started_event_attributes")
        ]
    return identities


#: The poller's activities that ingest a dataset.
INGESTING = ("look_and_finish", "finish_child")


async def ingest_attempts(address: str, child: str) -> list[tuple[str, int]]:
    """Per ingesting activity (``look_and_finish``, ``finish_child``) of the child's poller:
    the worker and the attempt that ran it to the end (Temporal records only the last
    attempt's start)."""
    client = await Client.connect(address)
    handle = client.get_workflow_handle(poller_workflow_id(child))
    await asyncio.wait_for(handle.result(), timeout=120)  # see activity_workers
    history = await handle.fetch_history()
    ingests = {
        event.event_id
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
        and event.activity_task_scheduled_event_attributes.activity_type.name in INGESTING
    }
    return [
        (started.identity, started.attempt)
        for event in history.events
        if event.HasField("activity_task_started_event_attributes")
        and (started := event.activity_task_started_event_attributes).scheduled_event_id in ingests
    ]


async def ingesting_worker(address: str, child: str) -> str | None:
    """The identity of the worker running the child's ingest right now, if any (its poller's
    ``look_and_finish`` or ``finish_child``, which ingest)."""
    client = await Client.connect(address)
    described = await client.get_workflow_handle(poller_workflow_id(child)).describe()
    for pending in described.raw_description.pending_activities:
        if pending.activity_type.name in INGESTING and pending.last_worker_identity:
            return str(pending.last_worker_identity)
    return None


# -- work is spread over the workers ------------------------------------------------------------


def test_a_mixed_load_is_spread_over_the_workers(scaled: Scaled, emulator: httpx.Client) -> None:
    stack = scaled.stack
    before = platform_run_count(emulator)
    bodies = [
        {
            "workspaceId": f"ws_mix_{i % 2}",
            "runs": [
                generator(items=200 + i, durationSecs=1, seed=f"mix-{i}-a"),
                generator(items=50, durationSecs=2, seed=f"mix-{i}-b"),
                generator(items=1_000, durationSecs=1, seed=f"mix-{i}-c"),
                LEADGEN,
            ],
        }
        for i in range(6)
    ]
    run_ids: list[str] = []
    for i, body in enumerate(bodies):
        # Alternate between the API processes: both accept work for the same workers.
        with httpx.Client(
            base_url=stack.api_urls[i % APIS], timeout=30, headers=stack.api_headers
        ) as api:
            accepted = api.post("/runs", json=body)
            assert accepted.status_code == 202, accepted.text
            run_ids.append(accepted.json()["runId"])
    with api_client(stack) as api:
        runs = wait_all_terminal(api, run_ids, timeout=180)
    for i, run in enumerate(runs):
        assert run["state"] == "succeeded", run
        assert [c["itemsIngested"] for c in run["children"]] == [200 + i, 50, 1_000, 15]
        for child in run["children"]:
            count, distinct, low, high = stored_rows(scaled.database_url, child["id"])
            assert (count, distinct, low, high) == (child["itemsIngested"],) * 2 + (
                0,
                child["itemsIngested"] - 1,
            )
    assert platform_run_count(emulator) - before == 6 * 4

    workflow_ids = [orchestrator_workflow_id(r) for r in run_ids] + [
        poller_workflow_id(c["id"]) for run in runs for c in run["children"]
    ]
    identities = run_async(lambda: activity_workers(stack.temporal_address, workflow_ids))
    by_worker = Counter(scaled.worker_of(identity) for identity in identities)
    assert sum(by_worker.values()) >= 6 * 4 * 2  # at least a start and a poll per child
    busy = [name for name in stack.instances_of("worker") if by_worker[name] > 0]
    assert len(busy) >= 2, f"activities by worker: {dict(by_worker)}"
    assert_no_leaked_capacity(emulator, stack)


# -- a worker killed mid-ingest ---------------------------------------------------------------


def test_a_worker_killed_mid_ingest_of_200k_rows(scaled: Scaled, emulator: httpx.Client) -> None:
    stack = scaled.stack
    before = platform_run_count(emulator)
    # Slow pages (scaled by the emulator's time scale: 30 ms each) so the kill lands mid-way.
    big = generator(items=BIG_ROWS, itemBytes=200, durationSecs=1, pageDelayMs=150, seed="big")
    with api_client(stack) as api:
        accepted = api.post("/runs", json={"workspaceId": "ws_big", "runs": [big]})
        assert accepted.status_code == 202, accepted.text
        run_id = accepted.json()["runId"]
        child = f"{run_id}.0"

        def mid_ingest() -> str | None:
            run = api.get(f"/runs/{run_id}").json()
            (state,) = run["children"]
            if state["state"] != "ingesting" or state["itemsIngested"] < 10_000:
                return None
            if state["itemsIngested"] > BIG_ROWS - 50_000:
                pytest.fail("the ingest was nearly done before the kill")  # not retried
            return run_async(lambda: ingesting_worker(stack.temporal_address, child))

        identity = eventually(mid_ingest, timeout=120, interval=0.1, description="mid-ingest")
        assert identity is not None
        victim = scaled.worker_of(identity)
        assert victim in stack.instances_of("worker")
        stack.kill(victim)  # SIGKILL: no cleanup, the activity's heartbeats just stop
        # The two workers left take the ingest over; the victim stays dead until the end.
        run = wait_terminal_long(api, run_id)
        kinds = event_kinds(api, run_id)

    assert run["state"] == "succeeded"
    assert run["itemsTotal"] == BIG_ROWS
    assert run["children"][0]["itemsIngested"] == BIG_ROWS
    assert stored_rows(scaled.database_url, child) == (BIG_ROWS, BIG_ROWS, 0, BIG_ROWS - 1)
    assert kinds["child.ingest_resume"] >= 1  # the retry resumed from the stored cursor
    assert kinds["child.spawn_attempt"] == 1
    assert platform_run_count(emulator) - before == 1, "the platform started a second run"
    # The ingest's last attempt (a retry) ran on one of the workers left.
    attempts = run_async(lambda: ingest_attempts(stack.temporal_address, child))
    # Looks that found the run still going come first; the last one ingested.
    identity, attempt = attempts[-1]
    assert attempt >= 2, attempts
    assert scaled.worker_of(identity) in set(stack.instances_of("worker")) - {victim}
    assert_no_leaked_capacity(emulator, stack)


def wait_terminal_long(api: httpx.Client, run_id: str) -> dict[str, Any]:
    (run,) = wait_all_terminal(api, [run_id], timeout=240)
    return run


# -- an API process killed mid-burst ------------------------------------------------------------


@dataclass
class BurstClient:
    """A caller that sends each request to the first API and, when that API fails (refused,
    reset, 5xx), retries it with the same Idempotency-Key on the next one."""

    urls: list[str]
    headers: dict[str, str]
    accepted: dict[str, str] = field(default_factory=dict)  # key -> run id
    retried: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def submit(self, key: str, body: dict[str, Any]) -> str:
        headers = self.headers | {"Idempotency-Key": f'"{key}"'}
        for attempt in range(20):
            url = self.urls[0] if attempt == 0 else self.urls[attempt % len(self.urls)]
            try:
                response = httpx.post(f"{url}/runs", json=body, headers=headers, timeout=30)
            except httpx.TransportError:
                response = None
            if response is not None and response.status_code == 202:
                run_id: str = response.json()["runId"]
                with self.lock:
                    self.accepted[key] = run_id
                return run_id
            assert response is None or response.status_code >= 500, response.text
            with self.lock:
                self.retried += 1
        raise AssertionError(f"{key} was never accepted")


def test_an_api_killed_mid_burst_leaves_one_request_per_key(
    scaled: Scaled, emulator: httpx.Client
) -> None:
    stack = scaled.stack
    first, second = stack.instances_of("api")
    workspace = f"ws_burst_{secrets.token_hex(3)}"
    before = platform_run_count(emulator)
    requests = 24
    bodies: dict[str, dict[str, Any]] = {
        f"burst-{workspace}-{i}": {
            "workspaceId": workspace,
            "runs": [
                generator(items=30 + i, durationSecs=1, seed=f"burst-{i}-a"),
                generator(items=10, durationSecs=1, seed=f"burst-{i}-b"),
            ],
        }
        for i in range(requests)
    }
    client = BurstClient(stack.api_urls, stack.api_headers)
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        futures = [pool.submit(client.submit, key, body) for key, body in bodies.items()]
        # Kill the first API once a quarter of the burst is in, while the rest is in flight.
        eventually(lambda: len(client.accepted) >= requests // 4, timeout=60, interval=0.01)
        stack.kill(first)
        for future in futures:
            future.result()
    assert len(client.accepted) == requests
    assert client.retried >= 1, "the kill landed after the burst"

    # The killed API comes back; every client retries its key once more there: replays only.
    stack.start_component(first)
    with httpx.Client(base_url=stack.api_urls[0], timeout=30, headers=stack.api_headers) as api:
        for key, body in bodies.items():
            again = api.post("/runs", json=body, headers={"Idempotency-Key": f'"{key}"'})
            assert again.status_code == 202, again.text
            assert again.json()["runId"] == client.accepted[key]
            assert again.headers.get("Idempotent-Replayed") == "true"
        listed = api.get("/runs", params={"workspaceId": workspace, "limit": 500}).json()
        assert sorted(r["id"] for r in listed["runs"]) == sorted(client.accepted.values())

        runs = wait_all_terminal(api, list(client.accepted.values()), timeout=180)
    expected = {client.accepted[key]: body for key, body in bodies.items()}
    platform_runs: list[str] = []
    for run in runs:
        assert run["state"] == "succeeded", run
        items = [c["input"]["items"] for c in expected[run["id"]]["runs"]]
        assert [c["itemsIngested"] for c in run["children"]] == items
        for child, count in zip(run["children"], items, strict=True):
            assert stored_rows(scaled.database_url, child["id"]) == (count, count, 0, count - 1)
            platform_runs.append(child["platformRunId"])
    assert len(set(platform_runs)) == len(platform_runs) == 2 * requests
    assert platform_run_count(emulator) - before == 2 * requests, "a duplicate platform run"
    assert second in stack.instances_of("api")
    assert_no_leaked_capacity(emulator, stack)


def test_the_stack_names_and_logs_every_instance(scaled: Scaled) -> None:
    stack = scaled.stack
    assert stack.instances == (
        "temporal",
        "emulator",
        "api-1",
        "api-2",
        "worker-1",
        "worker-2",
        "worker-3",
    )
    assert stack.api_urls == [stack.urls["api"], stack.urls["api-2"]]
    assert int(stack.urls["api-2"].rsplit(":", 1)[1]) == stack.ports.api + 1
    for url in stack.api_urls:
        assert httpx.get(f"{url}/healthz", timeout=5).json()["status"] == "ok"
    pids = {stack.pid(name) for name in stack.instances}
    assert None not in pids and len(pids) == len(stack.instances)
    for name in stack.instances_of("worker"):
        log: Path = stack.log_path(name)
        assert log.name == f"{name}.log"
        assert f"starting {name}:" in stack.log_tail(name)
    with pytest.raises(ValueError, match="runs as"):
        stack.kill("worker")
