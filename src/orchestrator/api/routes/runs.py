"""``/runs``: submit a request, read its state, its rows and its event log."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from sqlalchemy import Engine

from orchestrator.api.deps import State
from orchestrator.api.errors import problem
from orchestrator.api.routes.views import run_summary, run_view
from orchestrator.api.schemas import (
    AbortResponse,
    CreateRunRequest,
    CreateRunResponse,
    EventPage,
    EventView,
    ItemPage,
    ItemView,
    RunList,
    RunView,
)
from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries import items as item_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.domain.errors import NotFound, ValidationFailed
from orchestrator.service.control import abort_request
from orchestrator.service.submission import WorkflowStartFailed, submit_request

router = APIRouter(tags=["runs"])


def _links(run_id: str) -> dict[str, str]:
    return {
        "status_url": f"/runs/{run_id}",
        "items_url": f"/runs/{run_id}/items",
        "events_url": f"/runs/{run_id}/events",
    }


def _parse_cursor(cursor: str | None) -> int:
    if cursor is None or cursor == "":
        return 0
    if not cursor.isdigit():
        raise ValidationFailed("cursor is not one this API returned", field="cursor")
    return int(cursor)


def _require_run(engine: Engine, run_id: str) -> run_queries.RunRecord:
    with engine.connect() as conn:
        run = run_queries.get_run(conn, run_id)
    if run is None:
        raise NotFound(f"run {run_id} does not exist", field="runId")
    return run


@router.post(
    "/runs",
    status_code=202,
    response_model=CreateRunResponse,
    summary="Submit a request: spawn every actor run, ingest every row, roll up one state.",
    responses={400: {"description": "Unknown actor"}, 422: {"description": "Invalid body"}},
)
async def create_run(body: CreateRunRequest, state: State) -> CreateRunResponse | JSONResponse:
    if state.temporal is None:
        return problem(
            503, "unavailable", "Workflow engine unavailable", "Temporal is not connected"
        )
    try:
        run = await submit_request(state.engine, state.temporal, state.settings.task_queue, body)
    except WorkflowStartFailed:
        return problem(
            503, "unavailable", "Workflow engine unavailable", "the request could not be started"
        )
    return CreateRunResponse(run_id=run.id, state=run.state.value, **_links(run.id))


@router.get("/runs", response_model=RunList, summary="List requests, newest first.")
def list_runs(
    state: State,
    workspace_id: Annotated[str | None, Query(alias="workspaceId")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> RunList:
    with state.engine.connect() as conn:
        runs = run_queries.list_runs(conn, workspace_id=workspace_id, limit=limit)
    return RunList(runs=[run_summary(r) for r in runs])


@router.get("/runs/{run_id}", response_model=RunView, summary="A request with its children.")
def get_run(run_id: str, state: State) -> RunView:
    with state.engine.connect() as conn:
        run = run_queries.get_run(conn, run_id)
        if run is None:
            raise NotFound(f"run {run_id} does not exist", field="runId")
        children = run_queries.get_children(conn, run_id)
    return run_view(run, children)


@router.get("/runs/{run_id}/items", response_model=ItemPage, summary="Rows of a request, paged.")
def get_items(
    run_id: str,
    state: State,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    child_id: Annotated[str | None, Query(alias="childId")] = None,
) -> ItemPage:
    after = _parse_cursor(cursor)
    _require_run(state.engine, run_id)
    with state.engine.connect() as conn:
        items = item_queries.list_items(
            conn, run_id, after_id=after, limit=limit, child_id=child_id
        )
    return ItemPage(
        items=[
            ItemView(
                id=i.id, child_id=i.child_id, item_index=i.item_index, actor=i.actor, data=i.data
            )
            for i in items
        ],
        next_cursor=str(items[-1].id) if len(items) == limit else None,
    )


@router.get("/runs/{run_id}/events", response_model=EventPage, summary="The event log.")
def get_events(
    run_id: str,
    state: State,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
) -> EventPage:
    after = _parse_cursor(cursor)
    _require_run(state.engine, run_id)
    with state.engine.connect() as conn:
        events = event_queries.list_events(conn, run_id, after_id=after, limit=limit)
    return EventPage(
        events=[
            EventView(
                id=e.id,
                child_id=e.child_id,
                kind=e.kind,
                message=e.message,
                data=e.data,
                created_at=e.created_at,
            )
            for e in events
        ],
        next_cursor=str(events[-1].id) if len(events) == limit else None,
    )


@router.post(
    "/runs/{run_id}/abort",
    response_model=AbortResponse,
    summary="Abort a request: every unfinished actor run is aborted on the platform.",
    responses={
        202: {"description": "Abort under way; the request will end `aborted`."},
        200: {"description": "The request had already ended; nothing was done."},
    },
)
async def abort_run(run_id: str, state: State) -> AbortResponse | JSONResponse:
    if state.temporal is None:
        return problem(
            503, "unavailable", "Workflow engine unavailable", "Temporal is not connected"
        )
    outcome = await abort_request(state.engine, state.temporal, run_id)
    run = outcome.run
    if not outcome.accepted:
        return AbortResponse(
            run_id=run.id,
            state=run.state.value,
            aborting=False,
            detail=f"the request already ended ({run.state.value}); nothing to abort",
        )
    body = AbortResponse(
        run_id=run.id,
        state=run.state.value,
        aborting=True,
        detail="abort under way; unfinished actor runs are being aborted",
    )
    return JSONResponse(body.model_dump(mode="json", by_alias=True), status_code=202)
