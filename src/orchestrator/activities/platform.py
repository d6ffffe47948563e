"""Activities that talk to the platform: start a run, read its status, abort it.

Each records what it did in the database (child state, event) in the same step, so the read
model follows the platform closely. Starting is the delicate one: the platform has no
idempotency key for runs, so a start whose answer was lost is looked up (by the child id in
its webhook URL) before another start is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import quote

from sqlalchemy import Connection
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from orchestrator.activities.deps import ActivityDeps
from orchestrator.db.queries import admission as admission_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.queries.budgets import enforce_budgets
from orchestrator.db.queries.events import append_event, lock_run_events
from orchestrator.domain.follow import follow_plan
from orchestrator.domain.lifecycle import (
    ChildState,
    PlatformStatus,
    child_state_for_platform_terminal,
    is_platform_terminal,
)
from orchestrator.observability import metrics
from orchestrator.platform.port import (
    ErrorKind,
    PlatformError,
    PlatformRun,
    RunWebhook,
    StartOptions,
)
from orchestrator.platform.webhook_auth import (
    TERMINAL_EVENT_TYPES,
    WEBHOOK_CHILD_PARAM,
    WEBHOOK_TOKEN_HEADER,
    derive_webhook_token,
)
from orchestrator.workflows.policies import (
    ERR_ABORT_NOT_CONFIRMED,
    ERR_CAPACITY,
    ERR_PERMANENT,
    ERR_RETRYABLE,
)
from orchestrator.workflows.poller_start import start_poller
from orchestrator.workflows.types import (
    AbortChildInput,
    AbortChildResult,
    PollerInput,
    PollInput,
    PollResult,
    SettleUsageInput,
    SettleUsageResult,
    StartChildInput,
    StartChildResult,
    StopChildInput,
    StopChildResult,
    TimeOutChildInput,
)

T = TypeVar("T")


def as_activity_error(exc: PlatformError, capacity_delay: float) -> ApplicationError:
    """A platform error as Temporal sees it: permanent errors are not retried, capacity
    errors wait longer than transient ones."""
    if exc.kind is ErrorKind.PERMANENT:
        return ApplicationError(exc.message, type=ERR_PERMANENT, non_retryable=True)
    if exc.kind is ErrorKind.CAPACITY:
        return ApplicationError(
            exc.message, type=ERR_CAPACITY, next_retry_delay=timedelta(seconds=capacity_delay)
        )
    if exc.retry_after_seconds is not None:  # a 429's Retry-After, too long to wait in process
        return ApplicationError(
            exc.message,
            type=ERR_RETRYABLE,
            next_retry_delay=timedelta(seconds=exc.retry_after_seconds),
        )
    return ApplicationError(exc.message, type=ERR_RETRYABLE)


def webhook_url(public_url: str, child_id: str) -> str:
    return f"{public_url.rstrip('/')}/webhooks/platform?{WEBHOOK_CHILD_PARAM}={quote(child_id)}"


def _unknown_child(child_id: str) -> ApplicationError:
    return ApplicationError(f"unknown child {child_id}", type=ERR_PERMANENT, non_retryable=True)


async def _heartbeat_until_done(task: asyncio.Future[Any], every: float) -> None:
    while not task.done():
        activity.heartbeat()
        await asyncio.sleep(every)


@contextlib.asynccontextmanager
async def heartbeats() -> AsyncIterator[None]:
    """Heartbeat (a third of the heartbeat timeout apart) while the block runs; unlike
    ``_heartbeating`` a cancellation reaches the block as usual."""
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        yield
        return

    async def beat(every: float) -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(every)

    task = asyncio.create_task(beat(timeout.total_seconds() / 3))
    try:
        yield
    finally:
        task.cancel()


async def _heartbeating(call: Coroutine[Any, Any, T]) -> T:
    """Await ``call`` (a start, or the lookup of a lost one) while heartbeating, so a worker
    lost meanwhile is noticed after the heartbeat timeout rather than the whole
    start-to-close timeout.

    A cancellation (the caller aborted) does not interrupt the call: a start that may
    already have reached the platform is awaited, so its run is recorded and then aborted
    by the master's sweep instead of being left running unseen.
    """
    task = asyncio.ensure_future(call)
    timeout = activity.info().heartbeat_timeout
    beat = (
        asyncio.create_task(_heartbeat_until_done(task, timeout.total_seconds() / 3))
        if timeout
        else None
    )
    try:
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                if task.done():
                    break
                activity.logger.info("cancelled while a start is in flight; awaiting it")
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()
        return task.result()
    finally:
        if beat is not None:
            beat.cancel()


def _usage_data(run: PlatformRun) -> dict[str, Any]:
    """The usage figures of a read, for an event's data."""
    data: dict[str, Any] = {"usageTotalUsd": run.usage_total_usd}
    if run.charged_event_counts:
        data["chargedEventCounts"] = dict(run.charged_event_counts)
    return data


def same_usage(a: PlatformRun, b: PlatformRun) -> bool:
    """Two reads agree on what the run cost (the settling rule)."""
    return (
        a.usage_total_usd == b.usage_total_usd and a.charged_event_counts == b.charged_event_counts
    )


async def _sleep_heartbeating(seconds: float) -> None:
    """Sleep in short steps, heartbeating, so a lost worker is noticed soon."""
    end = asyncio.get_running_loop().time() + seconds
    while (left := end - asyncio.get_running_loop().time()) > 0:
        activity.heartbeat()
        await asyncio.sleep(min(left, 2.0))


def _stop_message(run: run_queries.RunRecord | None, default: T) -> str | T:
    """Why a child of this request is being stopped: the request's stop (a budget), the
    caller's abort, or ``default`` when neither happened."""
    if run is not None and run.stop_message:
        return run.stop_message
    if run is not None and run.aborted:
        return "aborted by the caller"
    return default


def _transition_and_reload(
    conn: Connection,
    child_id: str,
    state: ChildState,
    *,
    message: str | None = None,
    platform_run_id: str | None = None,
    dataset_id: str | None = None,
    platform_status: str | None = None,
    status_message: str | None = None,
) -> run_queries.ChildRecord:
    """Move a child to ``state`` and read it back, in one transaction."""
    run_queries.transition_child(
        conn,
        child_id,
        state,
        message=message,
        platform_run_id=platform_run_id,
        dataset_id=dataset_id,
        platform_status=platform_status,
        status_message=status_message,
    )
    child = run_queries.get_child(conn, child_id)
    if child is None:
        raise _unknown_child(child_id)
    return child


class PlatformActivities:
    def __init__(self, deps: ActivityDeps, client: Client | None = None) -> None:
        self._deps = deps
        # Starts the children's pollers (``StartChildInput.poller_for``).
        self._client = client

    def _result(
        self, child: run_queries.ChildRecord, refused: str | None = None
    ) -> StartChildResult:
        return StartChildResult.of(
            child.id,
            started=child.platform_run_id is not None and not child.state.terminal,
            platform_run_id=child.platform_run_id,
            dataset_id=child.dataset_id,
            failure=child.status_message if child.state.terminal else None,
            plan=follow_plan(child.options, self._deps.config.follow),
            refused=refused,
        )

    def _error(self, exc: PlatformError) -> ApplicationError:
        return as_activity_error(exc, self._deps.config.capacity_retry_seconds)

    async def _adopt(
        self, child: run_queries.ChildRecord, run: PlatformRun, how: str
    ) -> run_queries.ChildRecord:
        return await self._deps.tx(
            _transition_and_reload,
            child.id,
            ChildState.RUNNING,
            platform_run_id=run.id,
            dataset_id=run.dataset_id,
            platform_status=run.status,
            message=f"actor run {child.idx} ({child.actor}) {how} platform run {run.id}",
        )

    @activity.defn(name="start_actor_run")
    async def start_actor_run(self, params: StartChildInput) -> StartChildResult:
        """Start the child's platform run exactly once, with an ad-hoc webhook back to us,
        and (``poller_for``) the poller that follows it.

        It heartbeats from its first step: on a busy worker the reads and writes before the
        platform call can outlast the heartbeat timeout, and an attempt Temporal gave up on
        while it still ran would race its retry to the platform (issue 15's fan-out of 500
        found 3 % of children started twice that way)."""
        async with heartbeats():
            return await self._start_actor_run(params)

    async def _start_actor_run(self, params: StartChildInput) -> StartChildResult:
        deps = self._deps

        def read(conn: Connection) -> tuple[run_queries.ChildRecord | None, bool, str | None]:
            found = run_queries.get_child(conn, params.child_id)
            record = run_queries.get_run(conn, found.run_id) if found is not None else None
            stopped = record is not None and (record.aborted or bool(record.stop_reason))
            return found, stopped, record.stop_message if record is not None else None

        child, stopped, stop_message = await deps.read(read)
        if child is None:
            raise _unknown_child(params.child_id)
        if child.platform_run_id is None and not child.state.terminal:
            if stopped:
                child = await deps.tx(
                    _transition_and_reload,
                    child.id,
                    ChildState.ABORTED,
                    status_message=stop_message or "aborted before it was started",
                )
            elif child.state is ChildState.SPAWNING and (
                recovered := await self._recover_lost_start(child)
            ):
                child = recovered
            else:
                child, refused = await self._start(child, admitted=params.admitted)
                if refused is not None:
                    return self._result(child, refused)
        result = self._result(child)
        if params.poller_for and result.started:
            await self._start_poller(child, result, params.poller_for)
        return result

    async def _start_poller(
        self, child: run_queries.ChildRecord, started: StartChildResult, master_id: str
    ) -> None:
        """The started child's poller, from here rather than from the master: the master's
        history (one per request, every child's events in it) then holds only the start."""
        if self._client is None:
            raise RuntimeError("start_actor_run was built without a Temporal client")
        assert started.platform_run_id is not None and started.dataset_id is not None
        await start_poller(
            self._client,
            activity.info().task_queue,
            PollerInput.following(
                started.plan,
                run_id=child.run_id,
                child_id=child.id,
                platform_run_id=started.platform_run_id,
                dataset_id=started.dataset_id,
                parent_workflow_id=master_id,
            ),
        )

    async def _recover_lost_start(
        self, child: run_queries.ChildRecord
    ) -> run_queries.ChildRecord | None:
        """An earlier attempt reached the platform; its run may exist though we never heard
        back. Adopt it rather than start a second one. The child as it is then, or None
        when none was found."""
        deps = self._deps
        attempt = activity.info().attempt
        try:
            existing = await _heartbeating(
                deps.platform.find_run_by_webhook_url(webhook_url(deps.config.public_url, child.id))
            )
        except PlatformError as exc:
            raise self._error(exc) from None
        await deps.tx(
            append_event,
            child.run_id,
            "child.spawn_lookup",
            f"looked for a platform run started by an earlier attempt: "
            f"{existing.id if existing else 'none'}",
            child_id=child.id,
            data={"attempt": attempt, "found": existing.id if existing else None},
        )
        if existing is None:
            return None
        await deps.tx(
            append_event,
            child.run_id,
            "child.spawn_recovered",
            f"found platform run {existing.id} started by an earlier attempt",
            child_id=child.id,
            data={"attempt": attempt, "platformRunId": existing.id},
        )
        return await self._adopt(child, existing, "recovered")

    async def _start(
        self, child: run_queries.ChildRecord, *, admitted: bool = False
    ) -> tuple[run_queries.ChildRecord, str | None]:
        """Send the start (the child is ``spawning`` first, so a retry looks it up): the
        child as it is then, and None.

        An admitted child refused for capacity (402) is not retried: it goes back to
        ``queued`` and the refusal's error type comes back instead of None, for the
        admission workflow to requeue it and shrink the capacity it knows."""
        deps = self._deps
        attempt = activity.info().attempt

        def mark_spawning(conn: Connection) -> None:
            if child.state is not ChildState.SPAWNING:
                run_queries.transition_child(conn, child.id, ChildState.SPAWNING)
            append_event(
                conn,
                child.run_id,
                "child.spawn_attempt",
                f"starting actor run {child.idx} ({child.actor}), attempt {attempt}",
                child_id=child.id,
                data={"attempt": attempt, "platformActorId": child.platform_actor_id},
            )

        await deps.tx(mark_spawning)
        hook = RunWebhook(
            event_types=TERMINAL_EVENT_TYPES,
            request_url=webhook_url(deps.config.public_url, child.id),
            headers={
                WEBHOOK_TOKEN_HEADER: derive_webhook_token(deps.config.webhook_secret, child.id)
            },
            idempotency_key=f"orchestrator:{child.id}",
        )
        options = StartOptions(
            memory_mb=child.options.get("memoryMb"),
            timeout_sec=child.options.get("timeoutSec"),
            build=child.options.get("build"),
            max_items=child.options.get("maxItems"),
            max_total_charge_usd=child.options.get("maxTotalChargeUsd"),
        )
        try:
            run = await _heartbeating(
                deps.platform.start_run(child.platform_actor_id, child.input, options, [hook])
            )
        except PlatformError as exc:
            await self._log_failure(child, "child.spawn_error", "starting the run", exc)
            if admitted and exc.kind is ErrorKind.CAPACITY:
                reason = exc.error_type or "capacity"
                await deps.tx(admission_queries.requeue_child, child.id, reason)
                return await self._reload(child.id), reason
            if exc.kind is not ErrorKind.PERMANENT:
                raise self._error(exc) from None
            failed = await deps.tx(
                _transition_and_reload,
                child.id,
                ChildState.FAILED,
                status_message=exc.message,
            )
            return failed, None
        adopted = await self._adopt(child, run, "started as")
        if adopted.platform_run_id != run.id:
            await self._abort_duplicate(adopted, run)
        return adopted, None

    async def _abort_duplicate(self, child: run_queries.ChildRecord, run: PlatformRun) -> None:
        """Another attempt of this start recorded its run first (it was given up on by
        Temporal while it still ran): ours is a second run of the same child, aborted at
        once so it neither runs nor bills unseen."""
        try:
            await self._deps.platform.abort_run(run.id)
        except PlatformError as exc:
            await self._log_failure(child, "child.spawn_error", "aborting a duplicate run", exc)
            raise self._error(exc) from None
        await self._deps.tx(
            append_event,
            child.run_id,
            "child.spawn_duplicate",
            f"actor run {child.idx}: platform run {run.id} was a second start of this child "
            f"(it follows {child.platform_run_id}); aborted it",
            child_id=child.id,
            data={"platformRunId": run.id, "kept": child.platform_run_id},
        )

    async def _log_failure(
        self, child: run_queries.ChildRecord, kind: str, what: str, exc: PlatformError
    ) -> None:
        """Record a failed platform call; Temporal retries it unless it is permanent."""
        attempt = activity.info().attempt
        await self._deps.tx(
            append_event,
            child.run_id,
            kind,
            f"actor run {child.idx}: {what} failed ({exc.kind}, attempt {attempt}): {exc.message}",
            child_id=child.id,
            data={
                "attempt": attempt,
                "kind": exc.kind.value,
                "status": exc.status_code,
                "type": exc.error_type,
            },
        )

    async def _reload(self, child_id: str) -> run_queries.ChildRecord:
        child = await self._deps.read(run_queries.get_child, child_id)
        if child is None:
            raise _unknown_child(child_id)
        return child

    @activity.defn(name="poll_platform_run")
    async def poll_platform_run(self, params: PollInput) -> PollResult:
        """Read the run's status from the platform (authoritative) and record it."""
        deps = self._deps
        child = await self._reload(params.child_id)
        run = await self._read_run(
            child,
            params.platform_run_id,
            wait_secs=params.wait_secs,
            failure=("child.poll_error", "reading the run's status"),
        )

        terminal = is_platform_terminal(run.status)
        new_state = child_state_for_platform_terminal(run.status) if terminal else None
        # A run that did not succeed but keeps its rows is ``ingesting`` until they are in.
        partial_state = await self._partial_state(child, new_state, params.keep_partial)
        message = run.status_message or None
        if message is None and ChildState.ABORTED in (new_state, partial_state):
            # Our own abort (a stop or the caller's), seen here before the cascade got here.
            message = await self._stop_reason_or(child, None)
        if partial_state is not None:
            new_state = ChildState.INGESTING

        def record(conn: Connection) -> str | None:
            lock_run_events(conn, child.run_id)  # before any row write; see events.py
            run_queries.record_platform_status(conn, child.id, run.status, run.status_message)
            run_queries.record_usage(conn, child.id, run.usage_total_usd, run.charged_event_counts)
            append_event(
                conn,
                child.run_id,
                "child.poll",
                f"actor run {child.idx}: platform status {run.status} ({params.reason})",
                child_id=child.id,
                data={
                    "status": run.status,
                    "reason": params.reason,
                    "wait": params.wait_secs,
                    **_usage_data(run),
                },
            )
            if new_state is not None:
                run_queries.transition_child(
                    conn,
                    child.id,
                    new_state,
                    platform_status=run.status,
                    status_message=message,
                )
            # Spend is tracked here, on the figure just stored (docs/ARCHITECTURE.md).
            return enforce_budgets(conn, child.run_id)

        stop_reason = await deps.tx(record)
        return PollResult(
            status=run.status,
            terminal=terminal,
            succeeded=run.status == PlatformStatus.SUCCEEDED,
            status_message=message,
            child_state=new_state.value if new_state else None,
            partial_state=partial_state.value if partial_state else None,
            stop_reason=stop_reason,
        )

    async def _stop_reason_or(self, child: run_queries.ChildRecord, message: T) -> str | T:
        """The request's stop message (a budget) if it was stopped, else ``message``: the
        pollers' cancel path cannot tell a budget stop from a caller's abort, the row can."""
        return _stop_message(await self._deps.read(run_queries.get_run, child.run_id), message)

    async def _keeps_rows(self, child: run_queries.ChildRecord) -> bool:
        """Whether this child's rows are ingested although its run did not succeed."""
        if child.dataset_id is None:
            return False
        run = await self._deps.read(run_queries.get_run, child.run_id)
        return run is not None and run.keep_partial_rows

    async def _partial_state(
        self, child: run_queries.ChildRecord, new_state: ChildState | None, wanted: bool
    ) -> ChildState | None:
        """The final state of a run that ended without success whose rows are kept first."""
        if not wanted or new_state is None or new_state is ChildState.INGESTING:
            return None
        if child.state.terminal or not await self._keeps_rows(child):
            return None
        return new_state

    @activity.defn(name="settle_usage")
    async def settle_usage(self, params: SettleUsageInput) -> SettleUsageResult:
        """Read an ended run again until its usage stops changing, then record it as final.

        The platform's figures are preliminary right after the finish: the first settling
        read waits until ``usage_settle_seconds`` after its finishedAt, and the figure is
        settled once two reads ``usage_settle_interval_seconds`` apart agree (or after
        ``usage_settle_max_reads`` reads, the last one standing). Idempotent: a settled
        child is not read again; a run that has not ended is recorded, not settled.
        """
        cfg = self._deps.config
        child = await self._reload(params.child_id)
        if child.platform_run_id is None or child.usage_settled_at is not None:
            return SettleUsageResult(
                child.id, child.usage_total_usd, settled=child.usage_settled_at is not None
            )
        run = await self._read_usage(child, child.platform_run_id)
        reads = 1
        if not is_platform_terminal(run.status):
            await self._deps.tx(
                run_queries.record_usage, child.id, run.usage_total_usd, run.charged_event_counts
            )
            return SettleUsageResult(child.id, run.usage_total_usd, settled=False, reads=reads)
        finished = run.finished_at or datetime.now(UTC)
        wait = (finished - datetime.now(UTC)).total_seconds() + cfg.usage_settle_seconds
        # A first read from inside the settle window tells nothing: wait, then read again.
        previous: PlatformRun | None = run if wait <= 0 else None
        stable = False
        if wait > 0:
            await _sleep_heartbeating(wait)
        while True:
            if previous is not None:
                await _sleep_heartbeating(cfg.usage_settle_interval_seconds)
            run = await self._read_usage(child, child.platform_run_id)
            reads += 1
            if previous is not None and same_usage(previous, run):
                stable = True
                break
            if reads >= cfg.usage_settle_max_reads:
                break
            previous = run
        final = run

        def record(conn: Connection) -> run_queries.ChildRecord:
            lock_run_events(conn, child.run_id)  # before any row write; see events.py
            settled = run_queries.record_usage(
                conn, child.id, final.usage_total_usd, final.charged_event_counts, settled=True
            )
            total = settled.usage_total_usd
            append_event(
                conn,
                child.run_id,
                "child.usage_settled",
                f"actor run {child.idx}: usage settled at "
                f"{'unknown' if total is None else f'${total:.6f}'}",
                child_id=child.id,
                data={
                    "usageTotalUsd": total,
                    "chargedEventCounts": settled.charged_event_counts,
                    "reads": reads,
                    "stable": stable,
                },
                dedupe_key=f"{child.id}:usage_settled",
            )
            # A settled figure can still push the request or its workspace over a limit;
            # the other children's pollers see the stop on their next poll.
            enforce_budgets(conn, child.run_id)
            return settled

        settled = await self._deps.tx(record)
        metrics.observe_spend(child.actor, settled.usage_total_usd)  # a retry returns above
        return SettleUsageResult(child.id, settled.usage_total_usd, settled=True, reads=reads)

    async def _read_usage(
        self, child: run_queries.ChildRecord, platform_run_id: str
    ) -> PlatformRun:
        return await self._read_run(
            child, platform_run_id, failure=("child.usage_error", "reading the run's usage")
        )

    async def _read_run(
        self,
        child: run_queries.ChildRecord,
        platform_run_id: str,
        *,
        failure: tuple[str, str],
        wait_secs: int = 0,
    ) -> PlatformRun:
        """The run as the platform sees it now; a failed read is logged as ``failure``
        (event kind, what was being done) and retried by Temporal unless permanent."""
        try:
            run = await self._deps.platform.get_run(platform_run_id, wait_secs=wait_secs)
        except PlatformError as exc:
            await self._log_failure(child, *failure, exc)
            raise self._error(exc) from None
        if run is None:
            raise ApplicationError(
                f"platform run {platform_run_id} was not found",
                type=ERR_PERMANENT,
                non_retryable=True,
            )
        return run

    async def _abort_and_confirm(self, platform_run_id: str) -> PlatformRun | None:
        """Abort a platform run and wait for its final status (it may pass through ABORTING
        first); a run that is still not final is retried by Temporal."""
        deps = self._deps
        try:
            run = await deps.platform.abort_run(platform_run_id)
            if run is not None and not is_platform_terminal(run.status):
                run = await deps.platform.get_run(platform_run_id, wait_secs=30)
        except PlatformError as exc:
            raise self._error(exc) from None
        if run is not None and not is_platform_terminal(run.status):
            raise ApplicationError(
                f"platform run {run.id} is still {run.status} after abort",
                type=ERR_ABORT_NOT_CONFIRMED,
            )
        return run

    async def _end_child(
        self,
        child: run_queries.ChildRecord,
        state: ChildState,
        message: str | None,
        run: PlatformRun | None,
        *,
        abort_sent: bool = True,
    ) -> None:
        """Record the abort sent to the platform (if the child had a run) and the final
        state (or ``ingesting``, when its rows are kept first), in one transaction."""
        status = run.status if run is not None else None

        def record(conn: Connection) -> None:
            lock_run_events(conn, child.run_id)  # before any row write; see events.py
            if child.platform_run_id is not None and abort_sent:
                append_event(
                    conn,
                    child.run_id,
                    "child.abort",
                    f"actor run {child.idx}: abort sent to platform run {child.platform_run_id}",
                    child_id=child.id,
                    data={"status": status, "reason": state.value},
                )
            run_queries.transition_child(
                conn, child.id, state, platform_status=status, status_message=message
            )

        await self._deps.tx(record)

    @activity.defn(name="abort_child")
    async def abort_child(self, params: AbortChildInput) -> AbortChildResult:
        """Abort the child's platform run, confirm its final status, record ``aborted``.

        Idempotent: a child with no platform run, or one already final, is simply recorded
        as aborted (if it was not terminal yet).
        """
        child = await self._reload(params.child_id)
        if child.state.terminal:
            return AbortChildResult(child_id=child.id, state=child.state.value)
        run = None
        if child.platform_run_id is not None:
            run = await self._abort_and_confirm(child.platform_run_id)
        message = await self._stop_reason_or(child, "aborted by the caller")
        if run is not None:
            message = f"{message} (platform status {run.status})"
        await self._end_child(child, ChildState.ABORTED, message, run)
        return AbortChildResult(child_id=child.id, state=ChildState.ABORTED.value)

    @activity.defn(name="time_out_child")
    async def time_out_child(self, params: TimeOutChildInput) -> None:
        """Past its cap: stop the platform run too (a run we no longer watch would keep
        running and being billed), record its final status, then ``timed_out``."""
        child = await self._reload(params.child_id)
        if child.state.terminal:
            return
        run = None
        if child.platform_run_id is not None:
            run = await self._abort_and_confirm(child.platform_run_id)
        await self._end_child(child, ChildState.TIMED_OUT, params.message, run)

    @activity.defn(name="stop_child")
    async def stop_child(self, params: StopChildInput) -> StopChildResult:
        """Stop a child (the caller aborted, or its cap passed): abort its platform run and
        confirm the final status; then either end it in ``params.state`` or, when its rows
        are kept, record ``ingesting`` and say which ingest ends it.

        Idempotent, and safe to run twice at once (the poller and the master's sweep): a
        child already ``ingesting`` is not aborted again and gets the same answer.
        """
        child = await self._reload(params.child_id)
        plan = follow_plan(child.options, self._deps.config.follow)
        if child.state.terminal:
            return StopChildResult(child.id, child.state.value, plan.ingest_heartbeat_seconds)
        state = ChildState(params.state)
        message: str | None = params.message
        if state is ChildState.ABORTED:
            message = await self._stop_reason_or(child, message)
        run = None
        abort_sent = child.state is not ChildState.INGESTING
        ended_status = child.platform_status if not abort_sent else None
        if child.platform_run_id is not None and abort_sent:
            run = await self._abort_and_confirm(child.platform_run_id)
            if run is not None:
                message = f"{message} (platform status {run.status})"
                ended_status = run.status
        if ended_status is not None and ended_status != PlatformStatus.ABORTED:
            # Its run had ended by itself before the stop reached it: it keeps its real
            # state (a succeeded run stays succeeded, a failed one failed) and its message.
            ended = child_state_for_platform_terminal(ended_status)
            own = run.status_message if run is not None else child.status_message
            state = ChildState.SUCCEEDED if ended is ChildState.INGESTING else ended
            message = own or (None if state is ChildState.SUCCEEDED else message)
        if state is not ChildState.SUCCEEDED and not (
            params.keep_partial and await self._keeps_rows(child)
        ):
            await self._end_child(child, state, message, run, abort_sent=abort_sent)
            return StopChildResult(child.id, state.value, plan.ingest_heartbeat_seconds)
        await self._end_child(child, ChildState.INGESTING, message, run, abort_sent=abort_sent)
        return StopChildResult(
            child.id,
            ChildState.INGESTING.value,
            plan.ingest_heartbeat_seconds,
            final_state=state.value,
            final_message=message,
            dataset_id=child.dataset_id,
        )
