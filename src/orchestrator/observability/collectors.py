"""Gauges computed at scrape time: from the database, and from the admission snapshot.

``DatabaseCollector`` reads requests and children by state (and the children queued per
workspace) with one aggregate query each, on the read-only engine, at most once per
``refresh_seconds`` (the last figures are served in between): several Prometheus servers,
or a short scrape interval, then cost one round of queries. A failing database gives
``orchestrator_db_collector_up 0`` rather than a failed scrape, so the other metrics of the
process still arrive.

``CapacityGauges`` holds the latest view of the account's capacity, as the admission
workflow reports it: ``observe(view)`` sets it, ``refresh()`` asks an async source for it
(the API's ``/metrics`` calls it before each scrape, with a timeout). With no view, or
after a failed refresh, the capacity series are absent, never stale figures.

Every process sees the same database and the same admission workflow, so these gauges are
the same from every API replica: take one replica's figure (``max``), never a sum.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily, Metric
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from orchestrator.db.engine import read_only
from orchestrator.db.queries import observability as queries

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Counts:
    requests: dict[str, int]
    children: dict[str, int]
    queued: dict[str, int]


class DatabaseCollector:
    """``orchestrator_requests{state}``, ``orchestrator_children{state}``,
    ``orchestrator_children_queued{workspace}`` and ``orchestrator_db_collector_up``."""

    def __init__(
        self,
        engine: Engine,
        refresh_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = read_only(engine)
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._counts: _Counts | None = None
        self._read_at = 0.0

    def _read(self) -> _Counts:
        with self._engine.connect() as conn:
            return _Counts(
                requests=queries.requests_by_state(conn),
                children=queries.children_by_state(conn),
                queued=queries.queued_children_by_workspace(conn),
            )

    def _current(self) -> _Counts | None:
        with self._lock:  # one reader at a time; the others take its figures
            now = self._clock()
            if self._counts is None or now - self._read_at >= self._refresh_seconds:
                try:
                    self._counts = self._read()
                except SQLAlchemyError as exc:
                    log.warning("metrics: reading counts from the database failed: %s", exc)
                    self._counts = None
                    return None
                self._read_at = now
            return self._counts

    def describe(self) -> Iterator[Metric]:
        """The families (without samples) this collector yields, for the registry's checks."""
        yield from self._families(_Counts({}, {}, {}), up=True)

    def collect(self) -> Iterator[Metric]:
        counts = self._current()
        yield from self._families(counts or _Counts({}, {}, {}), up=counts is not None)

    @staticmethod
    def _families(counts: _Counts, *, up: bool) -> Iterator[Metric]:
        requests = GaugeMetricFamily(
            "orchestrator_requests", "Requests (headers) by state, now.", labels=["state"]
        )
        for state, count in sorted(counts.requests.items()):
            requests.add_metric([state], count)
        children = GaugeMetricFamily(
            "orchestrator_children", "Child actor runs by state, now.", labels=["state"]
        )
        for state, count in sorted(counts.children.items()):
            children.add_metric([state], count)
        queued = GaugeMetricFamily(
            "orchestrator_children_queued",
            "Children waiting for a capacity slot, by workspace (its queue length), now.",
            labels=["workspace"],
        )
        for workspace, count in sorted(counts.queued.items()):
            queued.add_metric([workspace], count)
        yield requests
        yield children
        yield queued
        yield GaugeMetricFamily(
            "orchestrator_db_collector_up",
            "1 if the database answered the metrics' queries at the last scrape, else 0.",
            value=1 if up else 0,
        )


@dataclass(frozen=True)
class WorkspaceSlots:
    """One workspace in the admission snapshot."""

    held: int  # slots its children hold now
    waiting: int  # its children waiting for a slot


@dataclass(frozen=True)
class CapacityView:
    """What the metrics need of the admission workflow's ``snapshot`` query."""

    slots: int  # concurrent-run slots the account has, as known now
    used: int
    memory_mb: int | None = None  # the account's memory for runs, if it is admitted too
    memory_used_mb: int | None = None
    workspaces: Mapping[str, WorkspaceSlots] = field(default_factory=dict)

    @property
    def free(self) -> int:
        return max(self.slots - self.used, 0)


CapacitySource = Callable[[], Awaitable[CapacityView | None]]


class CapacityGauges:
    """``orchestrator_capacity_slots{state}``, ``orchestrator_capacity_memory_mb{state}``
    and ``orchestrator_capacity_workspace_slots{workspace,state}`` from the latest view."""

    def __init__(self, source: CapacitySource | None = None, timeout_seconds: float = 2.0) -> None:
        self.source = source
        self._timeout_seconds = timeout_seconds
        self._view: CapacityView | None = None

    def observe(self, view: CapacityView | None) -> None:
        """Set the view the next scrape reports (None: report no capacity series)."""
        self._view = view

    async def refresh(self) -> None:
        """Ask the source for a fresh view; on failure or timeout report none."""
        if self.source is None:
            return
        try:
            view = await asyncio.wait_for(self.source(), timeout=self._timeout_seconds)
        except Exception as exc:  # a metrics scrape must not fail with its source
            log.warning("metrics: the capacity snapshot is unavailable: %r", exc)
            view = None
        self.observe(view)

    def collect(self) -> Iterator[Metric]:
        view = self._view
        if view is None:
            return
        slots = GaugeMetricFamily(
            "orchestrator_capacity_slots",
            "The account's concurrent-run slots: limit (as known), used, free.",
            labels=["state"],
        )
        slots.add_metric(["limit"], view.slots)
        slots.add_metric(["used"], view.used)
        slots.add_metric(["free"], view.free)
        yield slots
        if view.memory_mb is not None:
            memory = GaugeMetricFamily(
                "orchestrator_capacity_memory_mb",
                "The account's memory for runs in MB: limit (as known), used, free.",
                labels=["state"],
            )
            used = view.memory_used_mb or 0
            memory.add_metric(["limit"], view.memory_mb)
            memory.add_metric(["used"], used)
            memory.add_metric(["free"], max(view.memory_mb - used, 0))
            yield memory
        workspaces = GaugeMetricFamily(
            "orchestrator_capacity_workspace_slots",
            "Per workspace: slots held by its children, and its children waiting for one.",
            labels=["workspace", "state"],
        )
        for workspace, entry in sorted(view.workspaces.items()):
            workspaces.add_metric([workspace, "held"], entry.held)
            workspaces.add_metric([workspace, "waiting"], entry.waiting)
        yield workspaces
