"""Activities that talk to the platform: start a run, read its status, abort it.

Each records what it did in the database (child state, event) in the same step, so the read
model follows the platform closely.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from orchestrator.activities.deps import ActivityDeps
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.queries.events import append_event
from orchestrator.domain.lifecycle import (
    ChildState,
    PlatformStatus,
    child_state_for_platform_terminal,
    is_platform_terminal,
)
from orchestrator.platform.port import ErrorKind, PlatformError, RunWebhook, StartOptions
from orchestrator.platform.webhook_auth import (
    TERMINAL_EVENT_TYPES,
    WEBHOOK_CHILD_HEADER,
    WEBHOOK_TOKEN_HEADER,
    derive_webhook_token,
)
from orchestrator.workflows.policies import CAPACITY_RETRY_DELAY, ERR_CAPACITY, ERR_PERMANENT
from orchestrator.workflows.types import (
    AbortChildInput,
    PollInput,
    PollResult,
    StartChildInput,
    StartChildResult,
)


def as_activity_error(exc: PlatformError) -> ApplicationError:
    """A platform error as Temporal sees it: permanent errors are not retried."""
    if exc.kind is ErrorKind.PERMANENT:
        return ApplicationError(exc.message, type=ERR_PERMANENT, non_retryable=True)
    if exc.kind is ErrorKind.CAPACITY:
        return ApplicationError(
            exc.message, type=ERR_CAPACITY, next_retry_delay=CAPACITY_RETRY_DELAY
        )
    return ApplicationError(exc.message, type="PlatformRetryableError")


class PlatformActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self._deps = deps

    def _result(
        self, child: run_queries.ChildRecord, *, failure: str | None = None
    ) -> StartChildResult:
        config = self._deps.config
        timeout = child.options.get("timeoutSec")
        cap = (
            float(timeout) + config.default_timeout_grace_seconds
            if timeout
            else config.default_cap_seconds
        )
        return StartChildResult(
            child_id=child.id,
            started=child.platform_run_id is not None,
            platform_run_id=child.platform_run_id,
            dataset_id=child.dataset_id,
            cap_seconds=cap,
            poll_interval_seconds=config.poll_interval_seconds,
            failure=failure,
        )

    @activity.defn(name="start_actor_run")
    async def start_actor_run(self, params: StartChildInput) -> StartChildResult:
        """Start the child's platform run once, with an ad-hoc webhook pointing back at us."""
        deps = self._deps
        child = await deps.tx(run_queries.get_child, params.child_id)
        if child is None:
            raise ApplicationError(
                f"unknown child {params.child_id}", type=ERR_PERMANENT, non_retryable=True
            )
        if child.platform_run_id is not None or child.state.terminal:
            return self._result(child, failure=child.status_message)
        attempt = activity.info().attempt
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
            request_url=deps.config.public_url.rstrip("/") + "/webhooks/platform",
            headers={
                WEBHOOK_TOKEN_HEADER: derive_webhook_token(deps.config.webhook_secret, child.id),
                WEBHOOK_CHILD_HEADER: child.id,
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
            await deps.tx(
                append_event,
                child.run_id,
                "child.spawn_error",
                f"starting actor run {child.idx} failed ({exc.kind}): {exc.message}",
                child_id=child.id,
                data={
                    "attempt": attempt,
                    "kind": exc.kind.value,
                    "status": exc.status_code,
                    "type": exc.error_type,
                },
            )
            if exc.kind is ErrorKind.PERMANENT:
                await deps.tx(
                    run_queries.transition_child,
                    child.id,
                    ChildState.FAILED,
                    status_message=exc.message,
                )
                failed = await deps.tx(run_queries.get_child, child.id)
                assert failed is not None
                return self._result(failed, failure=exc.message)
            raise as_activity_error(exc) from None
        await deps.tx(
            run_queries.transition_child,
            child.id,
            ChildState.RUNNING,
            platform_run_id=run.id,
            dataset_id=run.dataset_id,
            platform_status=run.status,
            message=f"actor run {child.idx} ({child.actor}) started as platform run {run.id}",
        )
        started = await deps.tx(run_queries.get_child, child.id)
        assert started is not None
        return self._result(started)

    @activity.defn(name="poll_platform_run")
    async def poll_platform_run(self, params: PollInput) -> PollResult:
        """Read the run's status from the platform (authoritative) and record it."""
        deps = self._deps
        try:
            run = await deps.platform.get_run(params.platform_run_id, wait_secs=params.wait_secs)
        except PlatformError as exc:
            raise as_activity_error(exc) from None
        child = await deps.tx(run_queries.get_child, params.child_id)
        if child is None:
            raise ApplicationError(
                f"unknown child {params.child_id}", type=ERR_PERMANENT, non_retryable=True
            )
        if run is None:
            raise ApplicationError(
                f"platform run {params.platform_run_id} was not found",
                type=ERR_PERMANENT,
                non_retryable=True,
            )
        await deps.tx(run_queries.record_platform_status, child.id, run.status, run.status_message)
        await deps.tx(
            append_event,
            child.run_id,
            "child.poll",
            f"actor run {child.idx}: platform status {run.status} ({params.reason})",
            child_id=child.id,
            data={"status": run.status, "reason": params.reason},
        )
        terminal = is_platform_terminal(run.status)
        new_state: ChildState | None = None
        if terminal:
            new_state = child_state_for_platform_terminal(run.status)
            await deps.tx(
                run_queries.transition_child,
                child.id,
                new_state,
                platform_status=run.status,
                status_message=run.status_message or None,
            )
        return PollResult(
            status=run.status,
            terminal=terminal,
            succeeded=run.status == PlatformStatus.SUCCEEDED,
            status_message=run.status_message,
            child_state=new_state.value if new_state else None,
        )

    @activity.defn(name="abort_platform_run")
    async def abort_platform_run(self, params: AbortChildInput) -> None:
        """Abort the child's platform run (a no-op if it has none or already finished)."""
        deps = self._deps
        child = await deps.tx(run_queries.get_child, params.child_id)
        if child is None or child.platform_run_id is None:
            return
        try:
            run = await deps.platform.abort_run(child.platform_run_id)
        except PlatformError as exc:
            raise as_activity_error(exc) from None
        await deps.tx(
            append_event,
            child.run_id,
            "child.abort",
            f"abort sent to platform run {child.platform_run_id}",
            child_id=child.id,
            data={"status": run.status if run else None},
        )
