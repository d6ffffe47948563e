"""The MCP tool server: the orchestrator as a handful of tools for agents and chat models.

Built on the official MCP Python SDK (``mcp``, 2.x: ``MCPServer``). Every tool calls the
service layer, as the HTTP routes do: never the HTTP API, never a query of its own. The
caller is a workspace API key (a bearer token over HTTP, ``ORCHESTRATOR_API_KEY`` over
stdio) and sees only its workspace. Errors are tool results with ``isError: true`` carrying
the problem+json the HTTP API would answer (``mcp.errors``).

Limits are part of each tool's contract (and of docs/MCP.md): ``get_run`` waits at most
``MAX_WAIT_SECS``; a ``get_items`` page holds at most ``MAX_PAGE_ROWS`` rows and about
``PAGE_MAX_BYTES`` of JSON, so one call never floods a model's context. Tool arguments are
camelCase (``runId``, ``waitSecs``), like the HTTP API's fields.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, TypeVar

import anyio
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from orchestrator import __version__
from orchestrator.api.cursors import CURSOR_PATTERN, MAX_CURSOR, decode_item_cursor
from orchestrator.api.cursors import encode_item_cursor as encode_cursor
from orchestrator.api.deps import AppState
from orchestrator.api.routes.catalog import actor_view
from orchestrator.api.routes.views import abort_view, run_view, with_queue_positions
from orchestrator.api.schemas import (
    AbortResponse,
    CatalogView,
    CreateRunRequest,
    PlanRequest,
    PlanView,
    RunView,
)
from orchestrator.db.queries import item_pages
from orchestrator.db.queries import runs as run_queries
from orchestrator.domain.errors import DomainError
from orchestrator.mcp import paging
from orchestrator.mcp.errors import (
    arguments_error,
    domain_error_result,
    internal_error_result,
)
from orchestrator.service import catalog, planning
from orchestrator.service.auth import Principal
from orchestrator.service.commands import SubmitRequest
from orchestrator.service.control import abort_request
from orchestrator.service.reads import read_run, visible_run
from orchestrator.service.submission import SubmissionPolicy, submit

log = logging.getLogger(__name__)
T = TypeVar("T")

#: The longest ``get_run`` waits for the run to end (a tool call must stay short).
MAX_WAIT_SECS = 45
#: How often a waiting ``get_run`` looks at the run again.
WAIT_POLL_SECS = 1.0
#: About the most JSON one ``get_items`` page holds (its rows plus a small envelope).
PAGE_MAX_BYTES = 50_000
MAX_PAGE_ROWS = 500
DEFAULT_PAGE_ROWS = 100
MAX_FIELDS = 50
#: The argument that carries an HTTP API body (submit's and plan's ``request``).
BODY_ARGUMENT = "request"

#: Resolves the key of the call being served (raises ``Unauthorized`` if there is none).
CallerSource = Callable[[], Awaitable[Principal]]
StateSource = Callable[[], AppState]

INSTRUCTIONS = """\
Scraper orchestrator: runs scrapers (actors) on a platform and keeps every row they produce.
Typical flow: list_actors (what exists, its input schema and price) -> submit (answers at
once with a runId) -> get_run with waitSecs until `terminal` is true -> get_items page by
page, following nextCursor. abort stops a run that is no longer wanted. Rows are kept: read
only the pages and fields you need, and mind remainingRows / remainingBytes before reading on.
"""


class ToolModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class SubmitResult(ToolModel):
    run_id: str = Field(description="The request's id: pass it to get_run, get_items, abort.")
    state: str = Field(description="The request's state right after submitting (`queued`).")
    replayed: bool = Field(
        description="True when idempotencyKey matched an earlier identical request: that "
        "request's run is returned and nothing new was started."
    )
    next: str = Field(description="What to do next.")


class RunStatus(ToolModel):
    run: RunView
    waited_secs: float = Field(description="How long this call waited.")
    next: str = Field(description="What to do next.")


class ItemRowView(ToolModel):
    actor: str
    child_id: str = Field(description="The actor run (child) the row came from.")
    item_index: int = Field(description="The row's position in its actor run's dataset.")
    data: Any = Field(description="The row as the actor produced it (only `fields` if given).")


class ItemsPage(ToolModel):
    items: list[ItemRowView]
    returned: int = Field(description="Rows in this page.")
    page_bytes: int = Field(description="Bytes of this page's rows as JSON.")
    total: int = Field(description="Rows stored for the request so far.")
    remaining_rows: int = Field(description="Rows stored after this page.")
    remaining_bytes: int = Field(
        description="Estimated JSON bytes of the remaining rows (at this page's average)."
    )
    truncated_by_bytes: bool = Field(
        description="The byte cap, not `limit`, ended this page (ask for fewer `fields` to "
        "get more rows per page)."
    )
    run_terminal: bool = Field(description="The request has ended: no more rows will arrive.")
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page. Null only when the request has ended "
        "and every row was returned."
    )


def _ok(model: BaseModel) -> CallToolResult:
    document = model.model_dump(mode="json", by_alias=True)
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=document
    )


class OrchestratorMCP(MCPServer[Any]):
    """``MCPServer`` whose errors read like the HTTP API's problems."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, DomainError):
                return domain_error_result(cause)
            log.error("tool %s failed", name, exc_info=cause or exc)
            return internal_error_result()
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                # Fields inside `request` are named as the HTTP API's body names them.
                return domain_error_result(arguments_error(exc.__cause__, body=BODY_ARGUMENT))
            raise


#: Shielded work still running after its tool call was cancelled (kept referenced).
_UNCANCELLED: set[asyncio.Future[Any]] = set()


def _settle_abandoned(task: asyncio.Future[Any]) -> None:
    """The end of work whose call was cancelled: nobody awaits it, so a failure is logged."""
    _UNCANCELLED.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.warning("the work of a cancelled tool call failed: %s", task.exception())


async def run_to_the_end(work: Awaitable[T]) -> T:
    """Await ``work`` in a task of its own, which a cancelled tool call does not cancel.

    For the writes a call starts: a submit that has stored its request still starts the
    workflow (or rolls the request back, as on the HTTP path), an abort still cancels it.
    ``asyncio.shield`` rather than an anyio shielded scope, which does not stop a native
    asyncio cancellation of the serving task (the in-process transport's, say).
    """
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            _UNCANCELLED.add(task)
            task.add_done_callback(_settle_abandoned)
        raise


async def _guard(work: Callable[[], Awaitable[BaseModel]]) -> CallToolResult:
    """Run a tool's body: its model as the result, a domain error as a problem."""
    try:
        return _ok(await work())
    except DomainError as exc:
        return domain_error_result(exc)


def _next_for(run: RunView) -> str:
    if run.terminal:
        return (
            f"The request ended ({run.state}) with {run.items_total} rows: read them with "
            "get_items (page by page, following nextCursor)."
        )
    return (
        "The request is still running: call get_run again with waitSecs (up to "
        f"{MAX_WAIT_SECS}); get_items already returns the rows stored so far."
    )


@contextmanager
def _logging_left_alone() -> Iterator[None]:
    """The SDK's constructor calls ``logging.basicConfig`` (a rich handler on the root logger
    of a process that has none yet); our processes configure their own logging
    (``cli.main._logging``), so the root logger is put back as it was."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def build_server(
    state: StateSource,
    caller: CallerSource,
    *,
    token_verifier: TokenVerifier | None = None,
    auth: AuthSettings | None = None,
) -> OrchestratorMCP:
    """The tool server. ``state`` gives the engine, Temporal client and settings once the
    process has them; ``caller`` resolves the key of the call being served."""
    with _logging_left_alone():
        server = OrchestratorMCP(
            name="scraper-orchestrator",
            title="Scraper orchestrator",
            instructions=INSTRUCTIONS,
            version=__version__,
            token_verifier=token_verifier,
            auth=auth,
        )

    @server.tool(
        name="list_actors",
        description="The actor catalog: every actor a request may name, with its capabilities "
        "(what kind of rows it produces), the JSON Schema its input must satisfy, the fields "
        "of its rows, its pricing and its option defaults and caps. Call it first to choose "
        "actors and build a valid submit request. Takes no arguments.",
    )
    async def list_actors() -> Annotated[CallToolResult, CatalogView]:
        async def work() -> CatalogView:
            await caller()
            app = state()

            def read() -> CatalogView:
                with app.reader.connect() as conn:
                    found = catalog.read_catalog(conn)
                return CatalogView(
                    version=found.version, actors=[actor_view(e) for e in found.entries]
                )

            return await asyncio.to_thread(read)

        return await _guard(work)

    @server.tool(
        name="plan",
        description="Plan a brief without spending anything: for each capability in "
        "`request.needs` (capabilities are listed by list_actors, e.g. `leads`, `web-traffic`) "
        "the actor that meets it, its input built from `request.brief` and `request.icp`, the "
        "order of the steps (a step may take its input from an earlier step's rows), the rows "
        "expected and the estimated cost (`estimatedCostUsd`, `minimumChargeUsd`; it fits "
        "`request.budgetUsd` if given). Each step says why its actor was chosen. Nothing is "
        "started: show the plan and its cost, then run it with submit and "
        '`{"request": {"planId": ...}}` while the catalog is unchanged.',
    )
    async def plan(request: PlanRequest) -> Annotated[CallToolResult, PlanView]:
        async def work() -> PlanView:
            principal = await caller()
            record = await asyncio.to_thread(
                planning.plan_brief, state().engine, request.to_command(), caller=principal
            )
            return PlanView.model_validate(planning.plan_view(record))

        return await _guard(work)

    @server.tool(
        name="submit",
        description="Start a request. Say what to run in exactly one way: `request.planId` (a "
        "plan from the plan tool, the usual way: its cost was shown first), `request.runs` "
        "(actor runs, each an actor from list_actors and its input), or `request.needs` with "
        "`request.brief` (planned and started at once). Answers at once with the runId and "
        "state; the runs go on in the background. Then call get_run with waitSecs to wait "
        "for the end, and get_items to read the rows. `request` is the body of the HTTP "
        "API's POST /runs (optional budgetUsd caps what the whole request may spend). With "
        "idempotencyKey, repeating the same call returns the same run instead of starting "
        "another.",
    )
    async def submit_request(
        request: CreateRunRequest,
        idempotencyKey: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=255,
                pattern=r"^[ -~]+$",
                description="A unique key per logical request (printable ASCII).",
            ),
        ] = None,
    ) -> Annotated[CallToolResult, SubmitResult]:
        async def work() -> SubmitResult:
            principal = await caller()
            app = state()
            # A cancelled call still finishes the submit (the workflow starts, or the stored
            # request is rolled back), so nothing is left half-created.
            submission = await run_to_the_end(
                submit(
                    app.engine,
                    app.temporal,
                    app.settings.task_queue,
                    await _command_of(app, request, principal),
                    caller=principal,
                    policy=SubmissionPolicy.from_settings(app.settings),
                    idempotency_key=idempotencyKey,
                )
            )
            run = submission.run
            return SubmitResult(
                run_id=run.id,
                state=run.state.value,
                replayed=submission.replayed,
                next=f"Call get_run with runId {run.id} and waitSecs up to {MAX_WAIT_SECS} "
                "until terminal is true, then get_items.",
            )

        return await _guard(work)

    @server.tool(
        name="get_run",
        description="A request's status: its state, each actor run's state and row count, "
        "and what it cost so far. With waitSecs (at most 45) the call waits until the request "
        "ends or the time is up, whichever comes first, and sends progress notifications "
        "while it waits if you asked for them. When `terminal` is false, call again.",
    )
    async def get_run(
        ctx: Context[Any, Any],
        runId: Annotated[
            str, Field(min_length=1, max_length=128, description="The runId submit returned.")
        ],
        waitSecs: Annotated[
            float,
            Field(ge=0, le=MAX_WAIT_SECS, description="Wait up to this long for the end."),
        ] = 0,
    ) -> Annotated[CallToolResult, RunStatus]:
        async def work() -> RunStatus:
            principal = await caller()
            engine = state().engine
            started = anyio.current_time()

            def view() -> RunView:
                details = read_run(engine, runId, caller=principal)
                shown = run_view(
                    details.run,
                    details.children,
                    details.platform_calls,
                    usage_total_usd=details.usage_total_usd,
                )
                if details.plan is not None:
                    shown.plan = PlanView.model_validate(planning.plan_view(details.plan))
                return shown

            async def current_view() -> RunView:
                app = state()
                return await with_queue_positions(
                    await asyncio.to_thread(view), app.temporal, app.settings.task_queue
                )

            current = await current_view()
            while not current.terminal:
                elapsed = anyio.current_time() - started
                if elapsed >= waitSecs:
                    break
                counts = current.counts
                await ctx.report_progress(
                    elapsed,
                    waitSecs,
                    f"{current.state}: {counts.total - counts.running}/{counts.total} actor "
                    f"runs ended, {current.items_total} rows",
                )
                await anyio.sleep(min(WAIT_POLL_SECS, waitSecs - elapsed))
                current = await current_view()
            waited = round(anyio.current_time() - started, 3)
            return RunStatus(run=current, waited_secs=waited, next=_next_for(current))

        return await _guard(work)

    @server.tool(
        name="get_items",
        description="One page of a request's rows, in order, capped by `limit` rows AND by "
        f"about {PAGE_MAX_BYTES // 1000} KB of JSON, whichever comes first. The answer says "
        "how many rows are stored in all (`total`), how many are left after this page "
        "(`remainingRows`) and roughly how big they are (`remainingBytes`): read on only if "
        "you need them. Pass `nextCursor` back as `cursor` for the next page; it is null once "
        "the request has ended and every row was returned (while it runs, the cursor also "
        "picks up rows that arrive later). `fields` keeps only those top-level fields of each "
        "row (see the actor's output fields in list_actors), so more rows fit in a page.",
    )
    async def get_items(
        runId: Annotated[
            str, Field(min_length=1, max_length=128, description="The runId submit returned.")
        ],
        cursor: Annotated[
            str | None,
            Field(
                max_length=MAX_CURSOR,
                pattern=CURSOR_PATTERN,
                description="`nextCursor` of the previous page, exactly as returned.",
            ),
        ] = None,
        limit: Annotated[
            int, Field(ge=1, le=MAX_PAGE_ROWS, description="Most rows in the page.")
        ] = DEFAULT_PAGE_ROWS,
        fields: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=200)]] | None,
            Field(max_length=MAX_FIELDS, description="Only these top-level fields of each row."),
        ] = None,
    ) -> Annotated[CallToolResult, ItemsPage]:
        async def work() -> ItemsPage:
            principal = await caller()
            return await asyncio.to_thread(
                _read_page, state(), principal, runId, cursor, limit, fields
            )

        return await _guard(work)

    @server.tool(
        name="abort",
        description="Abort a request that is no longer wanted: every unfinished actor run is "
        "aborted on the platform (rows already stored are kept and stay readable). A request "
        "that already ended is left as it is (`aborting` false).",
    )
    async def abort(
        runId: Annotated[
            str, Field(min_length=1, max_length=128, description="The runId submit returned.")
        ],
    ) -> Annotated[CallToolResult, AbortResponse]:
        async def work() -> AbortResponse:
            principal = await caller()
            app = state()
            outcome = await run_to_the_end(
                abort_request(app.engine, app.temporal, runId, workspace_id=principal.workspace_id)
            )
            return abort_view(outcome)

        return await _guard(work)

    return server


async def _command_of(
    app: AppState, request: CreateRunRequest, principal: Principal
) -> SubmitRequest:
    """The service command of a submit: the runs given, a stored plan's, or a brief's (the
    same three ways, through the same use cases, as ``POST /runs``)."""
    command = request.to_command()
    if request.plan_id is not None:
        return await asyncio.to_thread(
            planning.request_for_plan, app.engine, request.plan_id, caller=principal, base=command
        )
    if request.needs is not None:
        return await asyncio.to_thread(
            planning.brief_request,
            app.engine,
            request.plan_command(),
            caller=principal,
            base=command,
        )
    return command


def _read_page(
    app: AppState,
    principal: Principal,
    run_id: str,
    cursor: str | None,
    limit: int,
    fields: list[str] | None,
) -> ItemsPage:
    offsets = decode_item_cursor(cursor)
    reader = app.reader
    with reader.connect() as conn:
        run = visible_run(conn, run_id, principal)
        children = run_queries.get_children(conn, run.id)
        plan = item_pages.plan_page(conn, run.id, offsets, limit=limit)
    # Rows are read a chunk at a time (no connection is held between chunks), and reading
    # stops where the byte cap cuts the page.
    rows = item_pages.stream_rows(reader, plan)
    taken = paging.take_rows(rows, max_bytes=PAGE_MAX_BYTES, fields=fields)
    after = paging.next_offsets(plan.next_offsets, plan.slices, taken.taken)
    # Counted from the children read before the plan: rows stored meanwhile show next time.
    stored = {c.idx: max(c.ingest_offset, after.get(c.idx, 0)) for c in children}
    remaining = paging.remaining_rows(stored, after)
    done = run.terminal and remaining == 0
    return ItemsPage(
        items=[ItemRowView.model_validate(row) for row in taken.rows],
        returned=len(taken.rows),
        page_bytes=taken.bytes,
        total=sum(stored.values()),
        remaining_rows=remaining,
        remaining_bytes=paging.estimate_bytes(remaining, taken),
        truncated_by_bytes=taken.truncated_by_bytes,
        run_terminal=run.terminal,
        next_cursor=None if done else encode_cursor(after),
    )
