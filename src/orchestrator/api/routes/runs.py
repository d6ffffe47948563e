"""``/runs``: submit a request, list requests, read one, its rows and its event log, abort.

Every route needs an API key (``Caller``). A workspace key sees only its workspace: another
workspace's run answers exactly like a run that does not exist (404), and listings are
filtered to the key's workspace, so nothing hints at other tenants. Admin keys see all.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from sqlalchemy import Connection
from starlette.concurrency import run_in_threadpool

from orchestrator.api.auth import Caller
from orchestrator.api.cursors import (
    CURSOR_PATTERN,
    MAX_CURSOR,
    decode_item_cursor,
    decode_run_cursor,
    encode_item_cursor,
    encode_run_cursor,
)
from orchestrator.api.deps import State
from orchestrator.api.item_formats import (
    MEDIA_TYPES,
    ItemFormat,
    negotiate,
    render_csv,
    render_json,
    render_ndjson,
)
from orchestrator.api.params import DateTimeParam
from orchestrator.api.routes.views import abort_view, run_summary, run_view, with_queue_positions
from orchestrator.api.schemas import (
    AbortResponse,
    CreateRunRequest,
    CreateRunResponse,
    EventPage,
    EventView,
    ItemPage,
    PlanView,
    RunList,
    RunView,
)
from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries import item_pages
from orchestrator.db.queries import plans as plan_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.queries.run_listing import RunFilter, list_runs_page
from orchestrator.domain.errors import NotFound, ValidationFailed
from orchestrator.domain.lifecycle import RunState
from orchestrator.service import planning
from orchestrator.service.auth import Principal
from orchestrator.service.control import abort_request
from orchestrator.service.errors import InvalidIdempotencyKey
from orchestrator.service.submission import SubmissionPolicy, submit

router = APIRouter(tags=["runs"])

MAX_IDEMPOTENCY_KEY = 255
#: A Structured Field string of 1-255 printable ASCII characters, or the same as a bare token
#: (not starting with a quote, no surrounding spaces). Declared in the document; the parser
#: checks exactly this.
IDEMPOTENCY_KEY_PATTERN = (
    rf'^(?:"[ -~]{{1,{MAX_IDEMPOTENCY_KEY}}}"'
    rf"|[!#-~](?:[ -~]{{0,{MAX_IDEMPOTENCY_KEY - 2}}}[!-~])?)$"
)
_SF_ESCAPE = re.compile(r'\\(["\\])')
#: Cursors are opaque to callers; api.cursors checks their shape (declared here) and content.
OpaqueCursor = Annotated[
    str | None,
    Query(
        json_schema_extra={"pattern": CURSOR_PATTERN, "maxLength": MAX_CURSOR},
        description="`nextCursor` of the previous page, exactly as returned.",
    ),
]
EVENT_CURSOR_PATTERN = r"^[0-9]{0,18}$"  # an event id (fits a signed 64-bit column)


def _links(run_id: str) -> dict[str, str]:
    return {
        "status_url": f"/runs/{run_id}",
        "items_url": f"/runs/{run_id}/items",
        "events_url": f"/runs/{run_id}/events",
    }


def _parse_event_cursor(cursor: str | None) -> int:
    if cursor is None or cursor == "":
        return 0
    if not re.fullmatch(EVENT_CURSOR_PATTERN, cursor):
        raise ValidationFailed("cursor is not one this API returned", field="cursor")
    return int(cursor)


def _visible_run(conn: Connection, run_id: str, caller: Principal) -> run_queries.RunRecord:
    """The run if the caller may see it; otherwise the same 404 as for a missing run."""
    run = run_queries.get_run(conn, run_id)
    if run is None or not caller.may_see(run.workspace_id):
        raise NotFound(f"run {run_id} does not exist", field="runId")
    return run


def parse_idempotency_key(raw: str | None) -> str | None:
    """The key of an ``Idempotency-Key`` header: a Structured Field string (``"…"``); a
    bare token is accepted too. 1-255 printable ASCII characters."""
    if raw is None:
        return None
    value = raw.strip()
    if not re.fullmatch(IDEMPOTENCY_KEY_PATTERN, value):
        raise InvalidIdempotencyKey(
            f"Idempotency-Key must be 1-{MAX_IDEMPOTENCY_KEY} printable ASCII characters",
            field="Idempotency-Key",
        )
    if value.startswith('"'):
        return _SF_ESCAPE.sub(r"\1", value[1:-1])
    return value


def _as_utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


@router.post(
    "/runs",
    status_code=202,
    response_model=CreateRunResponse,
    summary="Submit a request: spawn every actor run, ingest every row, roll up one state.",
    description="Validates everything before writing anything: limits, the callback URL, every "
    "actor. With an `Idempotency-Key`, repeating the same request returns the original run "
    "(header `Idempotent-Replayed: true`) and spawns nothing; the same key with a different "
    "request is a 422.",
    responses={202: {"description": "Accepted; the request runs in the background."}},
)
async def create_run(
    body: CreateRunRequest,
    caller: Caller,
    app_state: State,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            json_schema_extra={"pattern": IDEMPOTENCY_KEY_PATTERN},
            description='A unique key per logical request, e.g. `"8e03978e-40d5-43e8-bc93-'
            '6894a57f9324"` (Structured Field string; a bare token is accepted too).',
        ),
    ] = None,
) -> JSONResponse:
    settings = app_state.settings
    command = body.to_command()
    if body.plan_id is not None:
        command = await asyncio.to_thread(
            planning.request_for_plan, app_state.engine, body.plan_id, caller=caller, base=command
        )
    elif body.needs is not None:
        command = await asyncio.to_thread(
            planning.brief_request,
            app_state.engine,
            body.plan_command(),
            caller=caller,
            base=command,
        )
    submission = await submit(
        app_state.engine,
        app_state.temporal,
        settings.task_queue,
        command,
        caller=caller,
        policy=SubmissionPolicy.from_settings(settings),
        idempotency_key=parse_idempotency_key(idempotency_key),
    )
    run = submission.run
    answer = CreateRunResponse(run_id=run.id, state=run.state.value, **_links(run.id))
    headers = {"Location": f"/runs/{run.id}"}
    if submission.replayed:
        headers["Idempotent-Replayed"] = "true"
    return JSONResponse(
        answer.model_dump(mode="json", by_alias=True), status_code=202, headers=headers
    )


@router.get(
    "/runs",
    response_model=RunList,
    summary="List requests, newest first, with filters and a cursor.",
)
def list_runs(
    caller: Caller,
    app_state: State,
    workspace_id: Annotated[
        str | None,
        Query(alias="workspaceId", description="Admin keys only; workspace keys see their own."),
    ] = None,
    states: Annotated[
        list[RunState] | None, Query(alias="state", description="Repeat for several states.")
    ] = None,
    skill_id: Annotated[str | None, Query(alias="skillId")] = None,
    conversation_id: Annotated[str | None, Query(alias="conversationId")] = None,
    created_after: Annotated[
        DateTimeParam | None,
        Query(alias="createdAfter", description="Inclusive; RFC 3339, with an offset."),
    ] = None,
    created_before: Annotated[
        DateTimeParam | None,
        Query(alias="createdBefore", description="Exclusive; RFC 3339, with an offset."),
    ] = None,
    cursor: OpaqueCursor = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> RunList:
    if caller.workspace_id is not None:
        if workspace_id not in (None, caller.workspace_id):
            return RunList(runs=[], next_cursor=None)
        workspace_id = caller.workspace_id
    flt = RunFilter(
        workspace_id=workspace_id,
        states=tuple(s.value for s in states or ()),
        skill_run_id=skill_id,
        conversation_id=conversation_id,
        created_after=_as_utc(created_after),
        created_before=_as_utc(created_before),
    )
    after = decode_run_cursor(cursor)
    with app_state.reader.connect() as conn:
        runs, next_key = list_runs_page(conn, flt, after=after, limit=limit)
    return RunList(
        runs=[run_summary(r) for r in runs],
        next_cursor=encode_run_cursor(next_key) if next_key else None,
    )


@router.get(
    "/runs/{run_id}",
    response_model=RunView,
    summary="A request with its children, and what each cost (`usageTotalUsd`).",
)
async def get_run(run_id: str, caller: Caller, app_state: State) -> RunView:
    def read() -> RunView:
        with app_state.reader.connect() as conn:
            run = _visible_run(conn, run_id, caller)
            children = run_queries.get_children(conn, run_id)
            calls = event_queries.platform_calls(conn, run_id)
            spent = run_queries.run_usage_total(conn, run_id)
            plan = plan_queries.get_plan(conn, run.plan_id) if run.plan_id else None
        view = run_view(run, children, calls, usage_total_usd=spent)
        if plan is not None:
            view.plan = PlanView.model_validate(planning.plan_view(plan))
        return view

    view = await run_in_threadpool(read)
    return await with_queue_positions(view, app_state.temporal, app_state.settings.task_queue)


@router.get(
    "/runs/{run_id}/items",
    response_model=ItemPage,
    summary="Rows of a request, paged, as JSON, NDJSON or CSV (streamed).",
    description="Rows come child by child in item order. The cursor holds a position per "
    "child, so it never skips or repeats a row while ingestion continues: keep following "
    "`nextCursor` (also in the `X-Next-Cursor` header and a `Link: rel=next` header, for "
    "NDJSON and CSV) until it is null, which happens only once the request has ended and "
    "every row was returned. Choose the format with `format` or the `Accept` header.",
    responses={
        200: {
            "description": "A page of rows.",
            "content": {
                "application/x-ndjson": {"schema": {"type": "string"}},
                "text/csv": {"schema": {"type": "string"}},
            },
            "headers": {
                "X-Next-Cursor": {
                    "description": "The next page's cursor (absent at the end).",
                    "schema": {"type": "string"},
                }
            },
        },
    },
)
def get_items(
    run_id: str,
    caller: Caller,
    app_state: State,
    request: Request,
    cursor: OpaqueCursor = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    child_id: Annotated[str | None, Query(alias="childId")] = None,
    actor: Annotated[str | None, Query(description="Logical actor name.")] = None,
    output: Annotated[
        ItemFormat | None,
        Query(alias="format", description="json (default), ndjson or csv; overrides Accept."),
    ] = None,
) -> Response:
    fmt = output or negotiate(request.headers.get("accept"))
    offsets = decode_item_cursor(cursor)
    engine = app_state.reader
    with engine.connect() as conn:
        run = _visible_run(conn, run_id, caller)
        plan = item_pages.plan_page(
            conn, run.id, offsets, limit=limit, child_id=child_id, actor=actor
        )
    # More rows can still arrive while the request runs: keep handing out a cursor.
    next_cursor = (
        encode_item_cursor(plan.next_offsets) if plan.more_stored or not run.terminal else None
    )
    headers: dict[str, str] = {}
    if next_cursor is not None:
        headers["X-Next-Cursor"] = next_cursor
        link = request.url.include_query_params(cursor=next_cursor)
        headers["Link"] = f'<{link.path}?{link.query}>; rel="next"'

    def rows() -> Iterator[item_pages.ItemRow]:
        return item_pages.stream_rows(engine, plan)

    if fmt is ItemFormat.NDJSON:
        body = render_ndjson(rows())
    elif fmt is ItemFormat.CSV:
        body = render_csv(rows)
    else:
        body = render_json(rows(), next_cursor)
    return StreamingResponse(body, media_type=MEDIA_TYPES[fmt], headers=headers)


@router.get(
    "/runs/{run_id}/events",
    response_model=EventPage,
    summary="The event log.",
)
def get_events(
    run_id: str,
    caller: Caller,
    app_state: State,
    cursor: Annotated[
        str | None,
        Query(
            json_schema_extra={"pattern": EVENT_CURSOR_PATTERN},
            description="`nextCursor` of the previous page (an event id).",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
) -> EventPage:
    after = _parse_event_cursor(cursor)
    with app_state.reader.connect() as conn:
        _visible_run(conn, run_id, caller)
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
async def abort_run(run_id: str, caller: Caller, app_state: State) -> AbortResponse | JSONResponse:
    outcome = await abort_request(
        app_state.engine, app_state.temporal, run_id, workspace_id=caller.workspace_id
    )
    body = abort_view(outcome)
    if not outcome.accepted:
        return body
    return JSONResponse(body.model_dump(mode="json", by_alias=True), status_code=202)
