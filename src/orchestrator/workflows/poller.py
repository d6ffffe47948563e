"""``PollerWorkflow``: follows one platform run to its end, then ingests its dataset.

It waits for the ``platform_signal`` (sent when the platform's webhook arrives) or the poll
interval, whichever comes first, and then asks the platform for the run's status: the
signal only wakes it, so a lost, duplicated, early or forged webhook changes nothing but
timing. The first look and every interval poll long-poll (``waitForFinish``) for a few
seconds, so a run ending meanwhile is seen at once. Past its cap (the run's own timeout
plus a grace period) the child ends ``timed_out``. Cancelled (the caller aborted), it aborts
the platform run and records ``aborted``. Long waits continue-as-new before the history grows large.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from orchestrator.domain.lifecycle import ChildState
    from orchestrator.workflows import policies
    from orchestrator.workflows.types import (
        AbortChildInput,
        AbortChildResult,
        ChildFinished,
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
# The master's signal; named here too because the master imports this module.
CHILD_FINISHED_SIGNAL = "child_finished"


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
        try:
            result = await self._follow(params)
        except asyncio.CancelledError:
            aborted: AbortChildResult = await workflow.execute_activity(
                "abort_child",
                AbortChildInput(child_id=params.child_id),
                result_type=AbortChildResult,
                start_to_close_timeout=policies.ABORT_TIMEOUT,
                retry_policy=policies.ABORT_RETRY,
            )
            result = PollerResult(child_id=params.child_id, state=aborted.state)
        await self._report(params, result)
        return result

    async def _report(self, params: PollerInput, result: PollerResult) -> None:
        if not params.parent_workflow_id:
            return
        master = workflow.get_external_workflow_handle(params.parent_workflow_id)
        try:
            await master.signal(
                CHILD_FINISHED_SIGNAL, ChildFinished(child_id=params.child_id, state=result.state)
            )
        except Exception:
            # The master is gone (terminated or finished); the reconciler restarts it if the
            # request is not terminal, and it then reads this child's state from the database.
            workflow.logger.warning("could not report %s to its master", params.child_id)

    async def _follow(self, params: PollerInput) -> PollerResult:
        deadline = params.deadline_epoch or workflow.now().timestamp() + params.cap_seconds
        polls = params.polls
        # The first look is at once (a webhook may have come before this workflow existed).
        first = params.polls == 0
        while True:
            remaining = deadline - workflow.now().timestamp()
            if remaining <= 0:
                return await self._timed_out(params)
            if polls - params.polls >= params.polls_per_workflow_run or (
                workflow.info().is_continue_as_new_suggested()
            ):
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(replace(params, deadline_epoch=deadline, polls=polls))
            if first:
                first = False
                reason, wait = "first look", params.poll_long_wait_seconds
            else:
                try:
                    await workflow.wait_condition(
                        lambda: self._signalled,
                        timeout=timedelta(seconds=min(params.poll_interval_seconds, remaining)),
                    )
                    reason, wait = "webhook", 0
                except TimeoutError:
                    reason, wait = "interval", params.poll_long_wait_seconds
            self._signalled = False
            result: PollResult = await workflow.execute_activity(
                "poll_platform_run",
                PollInput(
                    child_id=params.child_id,
                    platform_run_id=params.platform_run_id,
                    wait_secs=wait,
                    reason=reason,
                ),
                result_type=PollResult,
                # A long poll holds the call open for ``wait`` seconds on the platform.
                start_to_close_timeout=policies.POLL_TIMEOUT + timedelta(seconds=wait),
                retry_policy=policies.POLL_RETRY,
            )
            polls += 1
            if result.terminal:
                break

        if not result.succeeded:
            return PollerResult(
                child_id=params.child_id, state=result.child_state or ChildState.FAILED.value
            )
        try:
            ingest: IngestResult = await workflow.execute_activity(
                "ingest_dataset",
                IngestInput(child_id=params.child_id, dataset_id=params.dataset_id),
                result_type=IngestResult,
                start_to_close_timeout=policies.INGEST_TIMEOUT,
                heartbeat_timeout=timedelta(seconds=params.ingest_heartbeat_seconds),
                retry_policy=policies.INGEST_RETRY,
            )
        except ActivityError as err:
            await self._record(
                params.child_id, ChildState.FAILED, f"ingesting the dataset failed: {err.cause}"
            )
            return PollerResult(child_id=params.child_id, state=ChildState.FAILED.value)
        return PollerResult(
            child_id=params.child_id, state=ChildState.SUCCEEDED.value, items=ingest.items
        )

    async def _timed_out(self, params: PollerInput) -> PollerResult:
        await self._record(
            params.child_id,
            ChildState.TIMED_OUT,
            f"no final status from the platform within {params.cap_seconds:.0f} s",
        )
        return PollerResult(child_id=params.child_id, state=ChildState.TIMED_OUT.value)

    async def _record(self, child_id: str, state: ChildState, message: str) -> None:
        await workflow.execute_activity(
            "record_child_outcome",
            ChildOutcomeInput(child_id=child_id, state=state.value, message=message),
            start_to_close_timeout=policies.DB_TIMEOUT,
            retry_policy=policies.DB_RETRY,
        )
