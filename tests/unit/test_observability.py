"""Metrics without servers: the database collector, the capacity gauges, the counters the
activities move, and the API's ``/metrics`` (its access rule and its format)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from bench.stack import free_ports
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, update
from temporalio.testing import ActivityEnvironment

from orchestrator.activities.delivery import send_attempt
from orchestrator.activities.ingest import IngestActivities
from orchestrator.config.settings import Settings
from orchestrator.db.engine import build_engine
from orchestrator.db.schema import scrape_children
from orchestrator.observability.collectors import (
    CapacityGauges,
    CapacityView,
    DatabaseCollector,
    WorkspaceSlots,
)
from orchestrator.observability.exposition import (
    api_registry,
    serve_worker_metrics,
    worker_registry,
)
from orchestrator.observability.metrics import PROCESS
from orchestrator.workflows.types import IngestInput, SettleUsageInput

# db_url replaces tests/conftest.py's: PostgreSQL is this module's own database.
from tests.unit.api_harness import api_for
from tests.unit.test_activities_ingest_and_records import deps, get_child, ingesting_child
from tests.unit.test_activities_usage import started
from tests.workflows.activity_support import (  # noqa: F401
    activities,
    db_url,
    store_request,
    worker_config,
)
from tests.workflows.fakes import FakePlatform, Script


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """A sample's value, 0 when absent (a labelled series appears on first use)."""
    return registry.get_sample_value(name, labels) or 0.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def db_registry(engine: Engine, clock: Clock, refresh: float = 10.0) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(DatabaseCollector(engine, refresh, clock=clock))
    return registry


def test_requests_and_children_are_counted_by_state_and_queues_by_workspace(
    engine: Engine,
) -> None:
    clock = Clock()
    registry = db_registry(engine, clock)
    before = {
        "requests": value(registry, "orchestrator_requests", state="queued"),
        "pending": value(registry, "orchestrator_children", state="pending"),
        "queued": value(registry, "orchestrator_children", state="queued"),
        "ws": value(registry, "orchestrator_children_queued", workspace="ws_activities"),
    }
    _, (first, _second) = store_request(engine, {}, {})
    # A child waiting for capacity (the admission's state): counted whatever states exist.
    with engine.begin() as conn:
        conn.execute(
            update(scrape_children).where(scrape_children.c.id == first).values(state="queued")
        )
    # Within the refresh interval the last figures are served: no new query.
    assert value(registry, "orchestrator_children", state="pending") == before["pending"]
    clock.now += 10
    assert value(registry, "orchestrator_requests", state="queued") == before["requests"] + 1
    assert value(registry, "orchestrator_children", state="pending") == before["pending"] + 1
    assert value(registry, "orchestrator_children", state="queued") == before["queued"] + 1
    assert (
        value(registry, "orchestrator_children_queued", workspace="ws_activities")
        == before["ws"] + 1
    )
    assert value(registry, "orchestrator_db_collector_up") == 1


def test_a_database_that_fails_gives_collector_down_not_a_failed_scrape(tmp_path: Path) -> None:
    unmigrated = build_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        registry = db_registry(unmigrated, Clock())
        assert registry.get_sample_value("orchestrator_db_collector_up") == 0
        assert registry.get_sample_value("orchestrator_requests", {"state": "queued"}) is None
    finally:
        unmigrated.dispose()


async def test_capacity_gauges_report_the_latest_snapshot_and_nothing_stale() -> None:
    gauges = CapacityGauges()
    registry = CollectorRegistry()
    registry.register(gauges)
    assert registry.get_sample_value("orchestrator_capacity_slots", {"state": "used"}) is None
    gauges.observe(
        CapacityView(
            slots=5,
            used=3,
            memory_mb=8192,
            memory_used_mb=6144,
            workspaces={"ws_a": WorkspaceSlots(held=3, waiting=97), "ws_b": WorkspaceSlots(0, 1)},
        )
    )
    assert value(registry, "orchestrator_capacity_slots", state="limit") == 5
    assert value(registry, "orchestrator_capacity_slots", state="used") == 3
    assert value(registry, "orchestrator_capacity_slots", state="free") == 2
    assert value(registry, "orchestrator_capacity_memory_mb", state="free") == 2048
    ws = "orchestrator_capacity_workspace_slots"
    assert value(registry, ws, workspace="ws_a", state="waiting") == 97
    assert value(registry, ws, workspace="ws_b", state="waiting") == 1
    assert value(registry, ws, workspace="ws_a", state="held") == 3

    async def fresh() -> CapacityView:
        return CapacityView(slots=4, used=4)

    gauges.source = fresh
    await gauges.refresh()
    assert value(registry, "orchestrator_capacity_slots", state="free") == 0
    assert registry.get_sample_value("orchestrator_capacity_memory_mb", {"state": "free"}) is None

    async def broken() -> CapacityView:
        raise RuntimeError("admission workflow not found")

    gauges.source = broken
    await gauges.refresh()
    assert registry.get_sample_value("orchestrator_capacity_slots", {"state": "used"}) is None

    async def hanging() -> CapacityView:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    gauges = CapacityGauges(hanging, timeout_seconds=0.01)
    gauges.observe(CapacityView(slots=1, used=0))
    await gauges.refresh()
    assert list(gauges.collect()) == []


async def test_an_ingest_counts_its_rows_and_its_completion_to_rows_latency(
    engine: Engine,
) -> None:
    platform = FakePlatform()
    _, cid = await ingesting_child(engine, platform, items=20)
    child = get_child(engine, cid)
    assert child.dataset_id is not None
    rows = value(PROCESS, "orchestrator_rows_ingested_total", actor="ultron-leadgen")
    latencies = value(PROCESS, "orchestrator_completion_to_rows_seconds_count")
    ingest = IngestActivities(deps(engine, platform)).ingest_dataset
    params = IngestInput(child_id=cid, dataset_id=child.dataset_id)
    await ActivityEnvironment().run(ingest, params)
    assert value(PROCESS, "orchestrator_rows_ingested_total", actor="ultron-leadgen") == rows + 20
    assert value(PROCESS, "orchestrator_completion_to_rows_seconds_count") == latencies + 1
    # A retry of the finished ingest stores and counts nothing.
    await ActivityEnvironment().run(ingest, params)
    assert value(PROCESS, "orchestrator_rows_ingested_total", actor="ultron-leadgen") == rows + 20
    assert value(PROCESS, "orchestrator_completion_to_rows_seconds_count") == latencies + 1


async def test_a_settled_usage_adds_its_cost_to_spend_once(engine: Engine) -> None:
    platform = FakePlatform()
    _, cid, _ = await started(engine, platform, Script(polls_to_finish=1, usage=[0.25] * 4))
    acts = activities(engine, platform)
    spend = value(PROCESS, "orchestrator_spend_usd_total", actor="ultron-leadgen")
    await ActivityEnvironment().run(acts.settle_usage, SettleUsageInput(child_id=cid))
    assert value(PROCESS, "orchestrator_spend_usd_total", actor="ultron-leadgen") == pytest.approx(
        spend + 0.25
    )
    await ActivityEnvironment().run(acts.settle_usage, SettleUsageInput(child_id=cid))
    assert value(PROCESS, "orchestrator_spend_usd_total", actor="ultron-leadgen") == pytest.approx(
        spend + 0.25
    )


async def test_a_callback_attempt_is_counted_by_outcome() -> None:
    failed = value(PROCESS, "orchestrator_callback_attempts_total", outcome="failed")
    # A private address is refused for good before anything is sent.
    outcome, final, _ = await send_attempt(worker_config(), 1, "https://10.1.2.3/cb", b"{}", {})
    assert not outcome.delivered and final
    assert value(PROCESS, "orchestrator_callback_attempts_total", outcome="failed") == failed + 1


async def test_api_metrics_need_an_admin_key_unless_opened(engine: Engine) -> None:
    async with api_for(engine) as api:
        api.app.state.metrics = api_registry(engine, api.settings)
        assert (await api.client.get("/metrics")).status_code == 401
        workspace_key, _ = api.workspace_key("ws_metrics")
        assert (
            await api.client.get("/metrics", headers=api.auth(workspace_key))
        ).status_code == 403
        response = await api.client.get("/metrics", headers=api.auth(api.admin_key))
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        names = {family.name for family in text_string_to_metric_families(response.text)}
        assert {
            "orchestrator_requests",
            "orchestrator_children",
            "orchestrator_db_collector_up",
            "orchestrator_rows_ingested",
            "process_cpu_seconds",
        } <= names
        assert "/metrics" not in (await api.client.get("/openapi.json")).json()["paths"]
    async with api_for(engine, metrics_require_key=False) as api:
        api.app.state.metrics = api_registry(engine, api.settings)
        assert (await api.client.get("/metrics")).status_code == 200


def test_the_worker_serves_its_counters_on_its_own_port_and_stops() -> None:
    (port,) = free_ports(1)
    settings = Settings(_env_file=None, worker_metrics_port=port)
    stop = serve_worker_metrics(settings, worker_registry())
    assert stop is not None
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert response.status_code == 200
        names = {family.name for family in text_string_to_metric_families(response.text)}
        assert {"orchestrator_rows_ingested", "orchestrator_callback_attempts"} <= names
        assert "orchestrator_requests" not in names  # the database gauges are the API's
    finally:
        stop()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    assert serve_worker_metrics(Settings(_env_file=None), worker_registry()) is None
    assert (
        serve_worker_metrics(Settings(_env_file=None, worker_metrics_port=0), CollectorRegistry())
        is None
    )
