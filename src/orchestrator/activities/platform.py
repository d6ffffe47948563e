"""Activities that talk to the platform: start a run, read its status, abort it.

Each records what it did in the database (child state, event) in the same step, so the read
model follows the platform closely. Starting is the delicate one: the platform has no
idempotency key for runs, so a start whose answer was lost is looked up (by the child id in
its webhook URL) before another start is sent.
"""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import quote

from sqlalchemy import Connection
from temporalio import activity
from temporalio.exceptions import ApplicationError

from orchestrator.activities.deps import ActivityDeps
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.queries.events import append_event, lock_run_events
from orchestrator.domain.lifecycle import (
    ChildState,
    PlatformStatus,
    child_state_for_platform_terminal,
    is_platform_terminal,
)
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
from orchestrator.workflows.policies import ERR_CAPACITY, ERR_PERMANENT
from orchestrator.workflows.types import (
    AbortChildInput,
    AbortChildResult,
    PollInput,
    PollResult,
    StartChildInput,
    StartChildResult,
)


def as_activity_error(exc: PlatformError, capacity_delay: float = 30.0) -> ApplicationError:
    """A platform error as Temporal sees it: permanent errors are not retried, capacity
    errors wait longer than transient ones."""
    if exc.kind is ErrorKind.PERMANENT:
        return ApplicationError(exc.message, type=ERR_PERMANENT, non_retryable=True)
    if exc.kind is ErrorKind.CAPACITY:
        return ApplicationError(
            exc.message, type=ERR_CAPACITY, next_retry_delay=timedelta(seconds=capacity_delay)
        )
    return ApplicationError(exc.message, type="PlatformRetryableError")


def webhook_url(public_url: str, child_id: str) -> str:
    return f"{public_url.rstrip('/')}/webhooks/platform?{WEBHOOK_CHILD_PARAM}={quote(child_id)}"


def _unknown_child(child_id: str) -> ApplicationError:
    return ApplicationError(f"unknown child {child_id}", type=ERR_PERMANENT, non_retryable=True)


class PlatformActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self._deps = deps

    def _result(self, child: run_queries.ChildRecord) -> StartChildResult:
        config = self._deps.config
        timeout = child.options.get("timeoutSec")
        cap = (
            float(timeout) + config.default_timeout_grace_seconds
            if timeout
            else config.default_cap_seconds
        )
        return StartChildResult(
            child_id=child.id,
            started=child.platform_run_id is not None and not child.state.terminal,
            platform_run_id=child.platform_run_id,
            dataset_id=child.dataset_id,
            cap_seconds=cap,
            poll_interval_seconds=config.poll_interval_seconds,
            failure=child.status_message if child.state.terminal else None,
            poll_long_wait_seconds=config.poll_long_wait_seconds,
            polls_per_workflow_run=config.polls_per_workflow_run,
            ingest_heartbeat_seconds=config.ingest_heartbeat_seconds,
        )

    async def _adopt(self, child: run_queries.ChildRecord, run: PlatformRun, how: str) -> None:
        await self._deps.tx(
            run_queries.transition_child,
            child.id,
            ChildState.RUNNING,
            platform_run_id=run.id,
            dataset_id=run.dataset_id,
            platform_status=run.status,
            message=f"actor run {child.idx} ({child.actor}) {how} platform run {run.id}",
        )

    @activity.defn(name="start_actor_run")
    async def start_actor_run(self, params: StartChildInput) -> StartChildResult:
        """Start the child's platform run exactly once, with an ad-hoc webhook back to us."""
        deps = self._deps
        child = await deps.read(run_queries.get_child, params.child_id)
        if child is None:
            raise _unknown_child(params.child_id)
        if child.platform_run_id is not None or child.state.terminal:
            return self._result(child)
        run_record = await deps.read(run_queries.get_run, child.run_id)
        if run_record is not None and run_record.aborted:
            await deps.tx(
                run_queries.transition_child,
                child.id,
                ChildState.ABORTED,
                status_message="aborted before it was started",
            )
            return self._result(await self._reload(child.id))
        attempt = activity.info().attempt
        if child.state is ChildState.SPAWNING:
            # An earlier attempt reached the platform; its run may exist though we never
            # heard back. Adopt it rather than start a second one.
            try:
                existing = await deps.platform.find_run_by_webhook_url(
                    webhook_url(deps.config.public_url, child.id)
                )
            except PlatformError as exc:
                raise as_activity_error(exc, deps.config.capacity_retry_seconds) from None
            await deps.tx(
                append_event,
                child.run_id,
                "child.spawn_lookup",
                f"looked for a platform run started by an earlier attempt: "
                f"{existing.id if existing else 'none'}",
                child_id=child.id,
                data={"attempt": attempt, "found": existing.id if existing else None},
            )
            if existing is not None:
                await deps.tx(
                    append_event,
                    child.run_id,
                    "child.spawn_recovered",
                    f"found platform run {existing.id} started by an earlier attempt",
                    child_id=child.id,
                    data={"attempt": attempt, "platformRunId": existing.id},
                )
                await self._adopt(child, existing, "recovered")
                return self._result(await self._reload(child.id))
        else:
            await deps.tx(run_queries.transition_child, child.id, ChildState.SPAWNING)
        await deps.tx(
            append_event,
            child.run_id,
            "child.spawn_attempt",
            f"starting actor run {child.idx} ({child.actor}), attempt {attempt}",
            child_id=child.id,
            data={"attempt": attempt, "platformActorId": child.platform_actor_id},
        )
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
        )
        try:
            run = await deps.platform.start_run(
                child.platform_actor_id, child.input, options, [hook]
            )
        except PlatformError as exc:
            await self._log_failure(child, "child.spawn_error", "starting the run", exc)
            if exc.kind is ErrorKind.PERMANENT:
                await deps.tx(
                    run_queries.transition_child,
                    child.id,
                    ChildState.FAILED,
                    status_message=exc.message,
                )
                return self._result(await self._reload(child.id))
            raise as_activity_error(exc, deps.config.capacity_retry_seconds) from None
        await self._adopt(child, run, "started as")
        return self._result(await self._reload(child.id))

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
        try:
            run = await deps.platform.get_run(params.platform_run_id, wait_secs=params.wait_secs)
        except PlatformError as exc:
            await self._log_failure(child, "child.poll_error", "reading the run's status", exc)
            raise as_activity_error(exc, deps.config.capacity_retry_seconds) from None
        if run is None:
            raise ApplicationError(
                f"platform run {params.platform_run_id} was not found",
                type=ERR_PERMANENT,
                non_retryable=True,
            )

        terminal = is_platform_terminal(run.status)
        new_state = child_state_for_platform_terminal(run.status) if terminal else None

        def record(conn: Connection) -> None:
            lock_run_events(conn, child.run_id)  # before any row write; see events.py
            run_queries.record_platform_status(conn, child.id, run.status, run.status_message)
            append_event(
                conn,
                child.run_id,
                "child.poll",
                f"actor run {child.idx}: platform status {run.status} ({params.reason})",
                child_id=child.id,
                data={"status": run.status, "reason": params.reason, "wait": params.wait_secs},
            )
            if new_state is not None:
                run_queries.transition_child(
                    conn,
                    child.id,
                    new_state,
                    platform_status=run.status,
                    status_message=run.status_message or None,
                )

        await deps.tx(record)
        return PollResult(
            status=run.status,
            terminal=terminal,
            succeeded=run.status == PlatformStatus.SUCCEEDED,
            status_message=run.status_message,
            child_state=new_state.value if new_state else None,
        )

    @activity.defn(name="abort_child")
    async def abort_child(self, params: AbortChildInput) -> AbortChildResult:
        """Abort the child's platform run, confirm its final status, record ``aborted``.

        Idempotent: a child with no platform run, or one already final, is simply recorded
        as aborted (if it was not terminal yet).
        """
        deps = self._deps
        child = await self._reload(params.child_id)
        if child.state.terminal:
            return AbortChildResult(child_id=child.id, state=child.state.value)
        status: str | None = None
        message = "aborted by the caller"
        if child.platform_run_id is not None:
            try:
                run = await deps.platform.abort_run(child.platform_run_id)
                if run is not None and not is_platform_terminal(run.status):
                    # Confirm: the platform may pass through ABORTING first.
                    run = await deps.platform.get_run(child.platform_run_id, wait_secs=30)
            except PlatformError as exc:
                raise as_activity_error(exc, deps.config.capacity_retry_seconds) from None
            if run is not None:
                status = run.status
                if not is_platform_terminal(run.status):
                    raise ApplicationError(
                        f"platform run {run.id} is still {run.status} after abort",
                        type="AbortNotConfirmed",
                    )
                message = f"aborted by the caller (platform status {run.status})"
            await deps.tx(
                append_event,
                child.run_id,
                "child.abort",
                f"actor run {child.idx}: abort sent to platform run {child.platform_run_id}",
                child_id=child.id,
                data={"status": status},
            )
        await deps.tx(
            run_queries.transition_child,
            child.id,
            ChildState.ABORTED,
            platform_status=status,
            status_message=message,
        )
        return AbortChildResult(child_id=child.id, state=ChildState.ABORTED.value)
