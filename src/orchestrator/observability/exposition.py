"""How each process serves its metrics, and the Temporal runtime that exports the SDK's own.

- The API serves ``GET /metrics`` on its own port (``api/routes/metrics.py``) from
  ``api_registry``: this process's counters, the database gauges and the capacity gauges.
- A worker has no HTTP server of its own, so ``serve_worker_metrics`` starts
  prometheus_client's server (a thread) on ``METRICS_HOST:WORKER_METRICS_PORT`` for
  ``worker_registry``: the activities' counters (rows, latency, callbacks, spend, platform
  calls). The database gauges are left to the API: they are the same from every process.
- Temporal's SDK metrics (``temporal_*``: task latencies, slots, polls, failures) are kept by
  the SDK's Rust core, which serves them itself with its runtime's Prometheus option, on
  ``METRICS_HOST:TEMPORAL_METRICS_PORT``: a second scrape target per process. Merging them
  into our endpoint would mean parsing and re-rendering the core's text on every scrape;
  two targets is how Temporal documents it, and neither side's series are touched.

Every endpoint serves the Prometheus text format through the library's encoder; nothing
here writes exposition text by hand.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    start_wsgi_server,
)
from sqlalchemy import Engine
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from orchestrator.config.settings import Settings
from orchestrator.domain.admission import Snapshot
from orchestrator.observability.collectors import (
    CapacityGauges,
    CapacityView,
    DatabaseCollector,
    WorkspaceSlots,
)
from orchestrator.observability.metrics import PROCESS

log = logging.getLogger(__name__)


def _base_registry() -> CollectorRegistry:
    """This process's counters plus the library's process, platform and GC figures."""
    registry = CollectorRegistry()
    for collector in (PROCESS, PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return registry


@dataclass(frozen=True)
class ApiMetrics:
    """What the API's ``/metrics`` serves: ``registry``, whose ``capacity`` gauges are
    refreshed before each scrape (set ``capacity.source`` to feed them)."""

    registry: CollectorRegistry
    capacity: CapacityGauges


def api_registry(engine: Engine, settings: Settings) -> ApiMetrics:
    registry = _base_registry()
    registry.register(DatabaseCollector(engine, settings.metrics_db_refresh_seconds))
    capacity = CapacityGauges()
    registry.register(capacity)
    return ApiMetrics(registry=registry, capacity=capacity)


def capacity_view(snapshot: Snapshot) -> CapacityView | None:
    """The capacity gauges' view of the admission workflow's ``snapshot`` query; none before
    it has read the account's limits once."""
    if not snapshot.known:
        return None
    return CapacityView(
        slots=snapshot.capacity_runs,
        used=snapshot.used_runs,
        memory_mb=snapshot.capacity_memory_mb,
        memory_used_mb=snapshot.used_memory_mb,
        workspaces={
            w.workspace_id: WorkspaceSlots(held=w.held, waiting=w.waiting)
            for w in snapshot.workspaces
        },
    )


def worker_registry() -> CollectorRegistry:
    return _base_registry()


def serve_worker_metrics(
    settings: Settings, registry: CollectorRegistry
) -> Callable[[], None] | None:
    """Serve ``registry`` at ``http://METRICS_HOST:WORKER_METRICS_PORT/metrics`` (a thread);
    returns what stops it, or None when the port is unset or 0."""
    port = settings.worker_metrics_port
    if not port:
        return None
    server, thread = start_wsgi_server(port, addr=settings.metrics_host, registry=registry)
    log.info("worker metrics at http://%s:%d/metrics", settings.metrics_host, port)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop


def temporal_runtime(settings: Settings) -> Runtime | None:
    """A Temporal runtime whose core serves the SDK's metrics on
    ``METRICS_HOST:TEMPORAL_METRICS_PORT`` (None when the port is unset or 0: the SDK's
    default runtime). Build it once per process, before the client: it binds the port."""
    port = settings.temporal_metrics_port
    if not port:
        return None
    address = f"{settings.metrics_host}:{port}"
    runtime = Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=address)))
    log.info("Temporal SDK metrics at http://%s/metrics", address)
    return runtime
