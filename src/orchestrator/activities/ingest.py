"""The ingest activity: copy a finished run's dataset into ``scrape_items``, page by page.

Resumable and idempotent: the cursor (the child's ``ingest_offset``) is committed with each
page, and rows are keyed by (child, item index), so a retry or a new worker after a crash
continues where the last committed page ended and never stores a row twice. The next page is
downloaded while the current one is written, since download and insert each take about half
the time; items arrive as JSON Lines and are stored as they came, never decoded. Pages are
read until a short page, because the dataset's ``itemCount`` lags; each request asks for one
item more than a page, so the last page is recognised without an extra empty request.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from orchestrator.activities.deps import ActivityDeps
from orchestrator.activities.platform import as_activity_error
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.queries.events import append_event
from orchestrator.db.queries.items import write_page
from orchestrator.db.queries.observability import child_entered
from orchestrator.domain.lifecycle import ChildState
from orchestrator.observability import metrics
from orchestrator.platform.port import PlatformError
from orchestrator.workflows.policies import ERR_PERMANENT
from orchestrator.workflows.types import IngestInput, IngestResult


def page_stored(
    conn: Connection,
    run: run_queries.RunRecord,
    child: run_queries.ChildRecord,
    end: int,
    count: int,
) -> None:
    append_event(
        conn,
        run.id,
        "child.ingest_page",
        f"actor run {child.idx}: stored {count} item(s), {end} so far",
        child_id=child.id,
        data={"offset": end, "count": count},
    )


class IngestActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self._deps = deps

    @activity.defn(name="ingest_dataset")
    async def ingest_dataset(self, params: IngestInput) -> IngestResult:
        deps = self._deps
        child = await deps.read(run_queries.get_child, params.child_id)
        if child is None:
            raise ApplicationError(
                f"unknown child {params.child_id}", type=ERR_PERMANENT, non_retryable=True
            )
        run = await deps.read(run_queries.get_run, child.run_id)
        assert run is not None
        if child.state.terminal:
            return IngestResult(child_id=child.id, items=child.items_ingested)
        offset = child.ingest_offset
        if offset:
            await deps.tx(
                append_event,
                run.id,
                "child.ingest_resume",
                f"actor run {child.idx}: resuming ingest at item {offset}",
                child_id=child.id,
                data={"offset": offset, "attempt": activity.info().attempt},
            )
        end, pages = await self._copy_pages(run, child, params.dataset_id, offset)
        final = ChildState(params.final_state or ChildState.SUCCEEDED)
        if final is ChildState.SUCCEEDED:
            message = f"actor run {child.idx} ({child.actor}): {end} item(s) ingested"
        else:
            message = f"actor run {child.idx} ({child.actor}): {end} item(s) kept; it {final}"
        moved = await deps.tx(
            run_queries.transition_child,
            child.id,
            final,
            message=message,
            status_message=params.final_message,
        )
        if moved:  # once per child: a retry after this finds it terminal
            await self._observe_latency(child.id)
        return IngestResult(child_id=child.id, items=end, pages=pages)

    async def _observe_latency(self, child_id: str) -> None:
        try:
            ended = await self._deps.read(child_entered, child_id, ChildState.INGESTING.value)
        except SQLAlchemyError:  # a metric is not worth failing a finished ingest for
            activity.logger.warning("completion-to-rows latency of %s not read", child_id)
            return
        if ended is not None:
            metrics.observe_completion_to_rows((datetime.now(UTC) - ended).total_seconds())

    async def _copy_pages(
        self,
        run: run_queries.RunRecord,
        child: run_queries.ChildRecord,
        dataset_id: str,
        offset: int,
    ) -> tuple[int, int]:
        """Store every page from ``offset`` on, downloading the next page while the current
        one is written. Returns the end offset and the number of pages stored."""
        deps = self._deps
        page_size = deps.config.dataset_page_size
        pages = 0
        next_page = asyncio.create_task(self._fetch(run, child, dataset_id, offset))
        try:
            while True:
                fetched = await next_page
                last = len(fetched) <= page_size
                items = fetched[:page_size]
                if not last:
                    next_page = asyncio.create_task(
                        self._fetch(run, child, dataset_id, offset + len(items))
                    )
                # Rows and cursor commit together; the page's event follows in a transaction
                # of its own, so page writes never wait for the event log's ordering lock.
                await deps.tx(write_page, run, child, offset, items)
                metrics.observe_rows(child.actor, len(items))
                await deps.tx(page_stored, run, child, offset + len(items), len(items))
                offset += len(items)
                pages += 1
                activity.heartbeat(offset)
                if last:
                    return offset, pages
        finally:
            if not next_page.done():
                next_page.cancel()

    async def _fetch(
        self,
        run: run_queries.RunRecord,
        child: run_queries.ChildRecord,
        dataset_id: str,
        at: int,
    ) -> list[str]:
        deps = self._deps
        try:
            # One item more than a page: a page that comes back full (page + 1) is not the
            # last, so the end is seen without a final empty call.
            return await deps.platform.dataset_page(
                dataset_id, at, deps.config.dataset_page_size + 1
            )
        except PlatformError as exc:
            await deps.tx(
                append_event,
                run.id,
                "child.ingest_error",
                f"actor run {child.idx}: reading the dataset at item {at} failed "
                f"({exc.kind}, attempt {activity.info().attempt}): {exc.message}",
                child_id=child.id,
                data={"offset": at, "kind": exc.kind.value, "status": exc.status_code},
            )
            raise as_activity_error(exc, deps.config.capacity_retry_seconds) from None
