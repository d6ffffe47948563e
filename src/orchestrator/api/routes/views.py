"""Turning records into API views (shared by the routes and the CLI's watch display)."""

from __future__ import annotations

from collections.abc import Mapping

from temporalio.client import Client

from orchestrator.api.schemas import (
    AbortResponse,
    ChildView,
    DeliverOptions,
    InputSource,
    RunCounts,
    RunSummary,
    RunView,
)
from orchestrator.db.queries.runs import ChildRecord, RunRecord
from orchestrator.domain.lifecycle import ChildState
from orchestrator.domain.row_push import DELIVER_ROWS_CALLBACK
from orchestrator.service import admission
from orchestrator.service.control import AbortOutcome


def child_view(child: ChildRecord, calls: Mapping[str, int] | None = None) -> ChildView:
    return ChildView(
        id=child.id,
        index=child.idx,
        actor=child.actor,
        platform_actor_id=child.platform_actor_id,
        platform_run_id=child.platform_run_id,
        dataset_id=child.dataset_id,
        state=child.state.value,
        terminal=child.state.terminal,
        platform_status=child.platform_status,
        status_message=child.status_message,
        items_ingested=child.items_ingested,
        partial=child.partial,
        created_at=child.created_at,
        started_at=child.started_at,
        finished_at=child.finished_at,
        platform_calls=dict(calls or {}),
        usage_total_usd=child.usage_total_usd,
        charged_event_counts=dict(child.charged_event_counts),
        usage_settled=child.usage_settled_at is not None,
        input_from={name: InputSource.of(source) for name, source in child.input_from.items()}
        if child.input_from
        else None,
        input_built=dict(child.input_built) if child.input_built is not None else None,
    )


def run_view(
    run: RunRecord,
    children: list[ChildRecord],
    platform_calls: Mapping[str, Mapping[str, int]] | None = None,
    *,
    usage_total_usd: float = 0.0,
) -> RunView:
    """``usage_total_usd`` is the request's spend (``runs.run_usage_total``)."""
    calls = platform_calls or {}
    return RunView(
        id=run.id,
        workspace_id=run.workspace_id,
        conversation_id=run.conversation_id,
        skill_id=run.skill_run_id,
        state=run.state.value,
        terminal=run.terminal,
        counts=RunCounts(
            total=len(children),
            succeeded=sum(1 for c in children if c.state is ChildState.SUCCEEDED),
            failed=sum(1 for c in children if c.state in (ChildState.FAILED, ChildState.TIMED_OUT)),
            running=sum(1 for c in children if not c.state.terminal),
            skipped=sum(1 for c in children if c.state is ChildState.SKIPPED),
        ),
        items_total=sum(c.items_ingested for c in children),
        created_at=run.created_at,
        updated_at=run.updated_at,
        finished_at=run.finished_at,
        usage_total_usd=usage_total_usd,
        usage_settled=all(
            c.usage_settled_at is not None for c in children if c.platform_run_id is not None
        ),
        budget_usd=run.budget_usd,
        plan_id=run.plan_id,
        stop_reason=run.stop_reason,
        stop_message=run.stop_message,
        catalog_version=run.catalog_version,
        children=[child_view(c, calls.get(c.id)) for c in children],
        keep_partial_rows=run.keep_partial_rows,
        deliver=DeliverOptions(
            rows="callback" if run.deliver_rows == DELIVER_ROWS_CALLBACK else "none"
        ),
    )


def run_summary(run: RunRecord) -> RunSummary:
    return RunSummary(
        id=run.id,
        workspace_id=run.workspace_id,
        conversation_id=run.conversation_id,
        skill_id=run.skill_run_id,
        state=run.state.value,
        terminal=run.terminal,
        children_total=run.children_total,
        created_at=run.created_at,
        finished_at=run.finished_at,
    )


def abort_view(outcome: AbortOutcome) -> AbortResponse:
    """What an abort answers (HTTP and MCP): under way, or the request had already ended."""
    run = outcome.run
    if not outcome.accepted:
        return AbortResponse(
            run_id=run.id,
            state=run.state.value,
            aborting=False,
            detail=f"the request already ended ({run.state.value}); nothing to abort",
        )
    return AbortResponse(
        run_id=run.id,
        state=run.state.value,
        aborting=True,
        detail="abort under way; unfinished actor runs are being aborted",
    )


async def with_queue_positions(view: RunView, temporal: Client | None, task_queue: str) -> RunView:
    """``view`` with each queued child's place in the admission workflow's queue (a Temporal
    query; when it cannot be read, the position is simply not shown)."""
    queued = [c for c in view.children if c.state == ChildState.QUEUED]
    if queued:
        positions = await admission.queue_positions(temporal, task_queue, [c.id for c in queued])
        for c in queued:
            c.queue_position = positions.get(c.id)
    return view
