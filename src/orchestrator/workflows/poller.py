"""``PollerWorkflow``: follows one platform run to its end, then ingests its dataset.

It waits for the ``platform_signal`` (sent when the platform's webhook arrives) or the poll
interval, whichever comes first, and then asks the platform for the run's status: the
signal only wakes it, so a lost, duplicated, early or forged webhook changes nothing but
timing. Past its cap (the run's own timeout plus a grace period) the child ends
``timed_out``. Long waits continue-as-new before the history grows large.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from orchestrator.domain.lifecycle import ChildState
    from orchestrator.workflows import policies
    from orchestrator.workflows.types import (
        ChildOutcomeInput,
        IngestInput,
        IngestResult,
        PlatformSignal,
        PollerInput,
        PollerResult,
        PollInput,
        PollResult,
    )

POLLER_WORKFLOW = "PollerWorkflow"
PLATFORM_SIGNAL = "platform_signal"
# Continue-as-new after this many polls even if the server has not suggested it yet.
POLLS_PER_RUN = 500


@workflow.defn(name=POLLER_WORKFLOW)
class PollerWorkflow:
    def __init__(self) -> None:
        self._signalled = False
        self._signals = 0

    @workflow.signal(name=PLATFORM_SIGNAL)
    def platform_signal(self, signal: PlatformSignal) -> None:
        self._signalled = True
        self._signals += 1

    @workflow.query(name="signals_received")
    def signals_received(self) -> int:
        return self._signals

    @workflow.run
    async def run(self, params: PollerInput) -> PollerResult:
        now = workflow.now().timestamp()
        deadline = params.deadline_epoch or now + params.cap_seconds
        polls = params.polls
        reason = "first poll"
        while True:
            self._signalled = False
            result: PollResult = await workflow.execute_activity(
                "poll_platform_run",
                PollInput(
                    child_id=params.child_id,
                    platform_run_id=params.platform_run_id,
                    reason=reason,
                ),
                result_type=PollResult,
                start_to_close_timeout=policies.POLL_TIMEOUT,
                retry_policy=policies.POLL_RETRY,
            )
            polls += 1
            if result.terminal:
                break
            remaining = deadline - workflow.now().timestamp()
            if remaining <= 0:
                await self._record(
                    params.child_id,
                    ChildState.TIMED_OUT,
                    f"no final status from the platform within {params.cap_seconds:.0f} s "
                    f"(last status {result.status})",
                )
                return PollerResult(child_id=params.child_id, state=ChildState.TIMED_OUT.value)
            if polls - params.polls >= POLLS_PER_RUN or (
                workflow.info().is_continue_as_new_suggested()
            ):
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(replace(params, deadline_epoch=deadline, polls=polls))
            try:
                await workflow.wait_condition(
                    lambda: self._signalled,
                    timeout=timedelta(seconds=min(params.poll_interval_seconds, remaining)),
                )
                reason = "webhook"
            except TimeoutError:
                reason = "interval"

        if not result.succeeded:
            return PollerResult(
                child_id=params.child_id, state=result.child_state or ChildState.FAILED.value
            )
        ingest: IngestResult = await workflow.execute_activity(
            "ingest_dataset",
            IngestInput(child_id=params.child_id, dataset_id=params.dataset_id),
            result_type=IngestResult,
            start_to_close_timeout=policies.INGEST_TIMEOUT,
            heartbeat_timeout=policies.INGEST_HEARTBEAT,
            retry_policy=policies.INGEST_RETRY,
        )
        return PollerResult(
            child_id=params.child_id, state=ChildState.SUCCEEDED.value, items=ingest.items
        )

    async def _record(self, child_id: str, state: ChildState, message: str) -> None:
        await workflow.execute_activity(
            "record_child_outcome",
            ChildOutcomeInput(child_id=child_id, state=state.value, message=message),
            start_to_close_timeout=policies.DB_TIMEOUT,
            retry_policy=policies.DB_RETRY,
        )
