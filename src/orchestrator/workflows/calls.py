"""Typed calls of every activity the workflows run, with their named policies.

Each helper calls its activity through the SDK's method reference
(``workflow.execute_activity_method``), so a renamed activity or a changed input or result
type is a type error here, not a failure at run time; the activity *names* (the strings in
``@activity.defn``) never change, so workflows in flight keep working. Both workflows call
these helpers instead of writing the same activity block twice.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.admission import AdmissionActivities
    from orchestrator.activities.delivery import DeliveryActivities
    from orchestrator.activities.finish import FinishActivities
    from orchestrator.activities.ingest import IngestActivities
    from orchestrator.activities.platform import PlatformActivities
    from orchestrator.activities.records import RecordActivities
    from orchestrator.activities.steps import StepActivities
    from orchestrator.domain.lifecycle import ChildState
    from orchestrator.workflows import policies
    from orchestrator.workflows.admission_types import (
        MarkQueuedInput,
        MarkQueuedResult,
        RefreshInput,
        RefreshResult,
        RequestSlotsInput,
        RequestSlotsResult,
    )
    from orchestrator.workflows.types import (
        AbortChildInput,
        AbortChildResult,
        ChildOutcomeInput,
        DeliverCallbackInput,
        DeliverCallbackResult,
        FinalizeInput,
        FinalizeResult,
        FinishChildInput,
        FinishChildResult,
        IngestInput,
        IngestResult,
        LookInput,
        LookResult,
        PollInput,
        PollResult,
        SettleUsageInput,
        SettleUsageResult,
        StartChildInput,
        StartChildResult,
        StepInputInput,
        StepInputResult,
        StopChildInput,
        StopChildResult,
        TimeOutChildInput,
    )


async def start_actor_run(
    child_id: str, *, admitted: bool = False, poller_for: str = ""
) -> StartChildResult:
    return await workflow.execute_activity_method(
        PlatformActivities.start_actor_run,
        # Flags only when set, so the input recorded by older histories is unchanged.
        StartChildInput(child_id=child_id, admitted=True, poller_for=poller_for)
        if poller_for
        else StartChildInput(child_id=child_id, admitted=True)
        if admitted
        else StartChildInput(child_id=child_id),
        start_to_close_timeout=policies.START_TIMEOUT,
        schedule_to_close_timeout=policies.START_SCHEDULE_TO_CLOSE,
        # A start lost with its worker is retried (and looked up) after this, not after
        # the whole start-to-close timeout.
        heartbeat_timeout=policies.START_HEARTBEAT_TIMEOUT,
        retry_policy=policies.START_RETRY,
        # On abort, let a start in flight finish so its run is known and aborted.
        cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    )


async def poll_platform_run(params: PollInput) -> PollResult:
    return await workflow.execute_activity_method(
        PlatformActivities.poll_platform_run,
        params,
        # A long poll holds the call open for ``wait_secs`` on the platform.
        start_to_close_timeout=policies.POLL_TIMEOUT + timedelta(seconds=params.wait_secs),
        retry_policy=policies.POLL_RETRY,
    )


async def abort_child(child_id: str) -> AbortChildResult:
    return await workflow.execute_activity_method(
        PlatformActivities.abort_child,
        AbortChildInput(child_id=child_id),
        start_to_close_timeout=policies.ABORT_TIMEOUT,
        retry_policy=policies.ABORT_RETRY,
    )


async def time_out_child(child_id: str, message: str) -> None:
    await workflow.execute_activity_method(
        PlatformActivities.time_out_child,
        TimeOutChildInput(child_id=child_id, message=message),
        start_to_close_timeout=policies.ABORT_TIMEOUT,
        retry_policy=policies.ABORT_RETRY,
    )


async def stop_child(
    child_id: str, state: ChildState, message: str, *, keep_partial: bool = True
) -> StopChildResult:
    return await workflow.execute_activity_method(
        PlatformActivities.stop_child,
        StopChildInput(
            child_id=child_id, state=state.value, message=message, keep_partial=keep_partial
        ),
        start_to_close_timeout=policies.ABORT_TIMEOUT,
        retry_policy=policies.ABORT_RETRY,
    )


async def settle_usage(child_id: str) -> SettleUsageResult:
    return await workflow.execute_activity_method(
        PlatformActivities.settle_usage,
        SettleUsageInput(child_id=child_id),
        start_to_close_timeout=policies.SETTLE_TIMEOUT,
        heartbeat_timeout=policies.SETTLE_HEARTBEAT_TIMEOUT,
        retry_policy=policies.SETTLE_RETRY,
    )


async def ingest_dataset(params: IngestInput, heartbeat_seconds: float) -> IngestResult:
    return await workflow.execute_activity_method(
        IngestActivities.ingest_dataset,
        params,
        start_to_close_timeout=policies.INGEST_TIMEOUT,
        heartbeat_timeout=timedelta(seconds=heartbeat_seconds),
        retry_policy=policies.INGEST_RETRY,
    )


async def finish_child(params: FinishChildInput, heartbeat_seconds: float) -> FinishChildResult:
    return await workflow.execute_activity_method(
        FinishActivities.finish_child,
        params,
        # It ingests the dataset: the ingest's own timeout, heartbeat and retries.
        start_to_close_timeout=policies.INGEST_TIMEOUT,
        heartbeat_timeout=timedelta(seconds=heartbeat_seconds),
        retry_policy=policies.INGEST_RETRY,
    )


async def look_and_finish(params: LookInput, heartbeat_seconds: float) -> LookResult:
    return await workflow.execute_activity_method(
        FinishActivities.look_and_finish,
        params,
        # It may ingest the dataset: the ingest's timeout and heartbeat; the poll's retries
        # (the poller falls back to a plain look and ``finish_child`` after them).
        start_to_close_timeout=policies.INGEST_TIMEOUT,
        heartbeat_timeout=timedelta(seconds=heartbeat_seconds),
        retry_policy=policies.POLL_RETRY,
    )


async def build_step_input(child_id: str) -> StepInputResult:
    return await workflow.execute_activity_method(
        StepActivities.build_step_input,
        StepInputInput(child_id=child_id),
        start_to_close_timeout=policies.STEP_INPUT_TIMEOUT,
        heartbeat_timeout=policies.STEP_INPUT_HEARTBEAT_TIMEOUT,
        retry_policy=policies.STEP_INPUT_RETRY,
    )


async def record_child_outcome(child_id: str, state: ChildState, message: str) -> None:
    await workflow.execute_activity_method(
        RecordActivities.record_child_outcome,
        ChildOutcomeInput(child_id=child_id, state=state.value, message=message),
        start_to_close_timeout=policies.DB_TIMEOUT,
        retry_policy=policies.DB_RETRY,
    )


async def finalize_run(run_id: str) -> FinalizeResult:
    return await workflow.execute_activity_method(
        RecordActivities.finalize_run,
        FinalizeInput(run_id=run_id),
        start_to_close_timeout=policies.DB_TIMEOUT,
        retry_policy=policies.DB_RETRY,
    )


async def deliver_callback(run_id: str) -> DeliverCallbackResult:
    return await workflow.execute_activity_method(
        DeliveryActivities.deliver_callback,
        DeliverCallbackInput(run_id=run_id),
        start_to_close_timeout=policies.CALLBACK_TIMEOUT,
        retry_policy=policies.CALLBACK_RETRY,
    )


async def request_slots(run_id: str, child_ids: list[str], master_id: str) -> RequestSlotsResult:
    return await workflow.execute_activity_method(
        AdmissionActivities.request_slots,
        RequestSlotsInput(run_id=run_id, child_ids=child_ids, master_id=master_id),
        start_to_close_timeout=policies.ADMISSION_TIMEOUT,
        retry_policy=policies.ADMISSION_RETRY,
    )


async def mark_queued(child_ids: list[str]) -> MarkQueuedResult:
    return await workflow.execute_activity_method(
        AdmissionActivities.mark_queued,
        MarkQueuedInput(child_ids=child_ids),
        start_to_close_timeout=policies.DB_TIMEOUT,
        retry_policy=policies.DB_RETRY,
    )


async def refresh_admission(held: list[str]) -> RefreshResult:
    return await workflow.execute_activity_method(
        AdmissionActivities.refresh_admission,
        RefreshInput(held=held),
        start_to_close_timeout=policies.ADMISSION_TIMEOUT,
        retry_policy=policies.REFRESH_RETRY,
    )
