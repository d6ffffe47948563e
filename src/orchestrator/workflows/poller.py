"""``PollerWorkflow``: follows one platform run to its end, then ingests its dataset.

It waits for the ``platform_signal`` (sent when the platform's webhook arrives) or the poll
interval, whichever comes first, and then asks the platform for the run's status: the
signal only wakes it, so a lost, duplicated, early or forged webhook changes nothing but
timing. The first look and every interval poll long-poll (``waitForFinish``) for a few
seconds, so a run ending meanwhile is seen at once. Past its cap (the run's own timeout
plus a grace period) the platform run is aborted and the child ends ``timed_out``.
Cancelled (the caller aborted), it aborts the platform run and records ``aborted``. A run
that did not succeed (failed, timed out, aborted) has its dataset ingested first, unless the
request turned that off (``keepPartialRows``). Long waits continue-as-new before the history
grows large.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from orchestrator.domain.ids import admission_workflow_id
    from orchestrator.domain.lifecycle import ChildState
    from orchestrator.workflows import calls
    from orchestrator.workflows.admission_types import RELEASE_SLOTS_SIGNAL, SlotRelease
    from orchestrator.workflows.poller_start import POLLER_WORKFLOW, POLLER_WORKFLOW_V2
    from orchestrator.workflows.row_delivery import ROW_PUSH_PATCH, push_child_rows
    from orchestrator.workflows.types import (
        CHILD_FINISHED_SIGNAL,
        ChildFinished,
        FinishChildInput,
        FinishChildResult,
        IngestInput,
        LookInput,
        PlatformSignal,
        PollerInput,
        PollerResult,
        PollInput,
        PollResult,
        StopRequest,
    )

PLATFORM_SIGNAL = "platform_signal"
# The master's signals; named here too because the master imports this module.
STOP_REQUEST_SIGNAL = "stop_request"
# Pollers that reach their cap from here on abort the platform run (time_out_child) instead
# of only recording timed_out; histories from before replay the old path.
TIME_OUT_ABORTS_PATCH = "time-out-aborts-platform-run"
# From here on a child whose run did not succeed (failed, timed out, aborted by the caller or
# past its cap) has its dataset ingested before it ends; histories from before replay the
# old paths, which end such a child at once.
PARTIAL_ROWS_PATCH = "keep-partial-rows"
# Pollers from here on settle the run's usage after its end (and any ingest), before they
# report; histories from before replay without it.
SETTLE_USAGE_PATCH = "settle-usage-after-end"
# Pollers from here on give the child's admission slot back as soon as the platform run is
# over (before the ingest): the account's slot is free then.
RELEASE_AT_RUN_END_PATCH = "release-slot-at-run-end"


class _RunFollower:
    """What both poller types share: following the run until it is final, asking the master
    to stop, reporting to it, and stopping the run (caller abort, cap)."""

    def __init__(self) -> None:
        self._signalled = False
        self._keep_partial = False

    async def _look(self, params: PollerInput, look: PollInput) -> PollResult:
        """Read the run's status from the platform (and record it)."""
        return await calls.poll_platform_run(look)

    async def _settle_usage(self, params: PollerInput) -> None:
        """Read the ended run's usage until it settles (after the ingest, so rows are never
        delayed; before the report, so the request's callback carries the final figure).
        Spend is informational: failing to settle it changes no state."""
        try:
            await calls.settle_usage(params.child_id)
        except ActivityError as err:
            workflow.logger.warning("usage of %s did not settle: %s", params.child_id, err.cause)

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

    async def _poll_until_final(self, params: PollerInput) -> PollResult | None:
        """Poll until the platform reports a final status; None when the cap passed first.
        Continues-as-new (carrying the deadline) after ``polls_per_workflow_run`` polls."""
        deadline = params.deadline_epoch or workflow.now().timestamp() + params.cap_seconds
        polls = params.polls
        # The first look is at once (a webhook may have come before this workflow existed).
        first = params.polls == 0
        while True:
            remaining = deadline - workflow.now().timestamp()
            if remaining <= 0:
                return None
            if polls - params.polls >= params.polls_per_workflow_run or (
                workflow.info().is_continue_as_new_suggested()
            ):
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(replace(params, deadline_epoch=deadline, polls=polls))
            reason, wait = await self._next_look(params, first, remaining)
            first = False
            self._signalled = False
            result = await self._look(
                params,
                PollInput(
                    child_id=params.child_id,
                    platform_run_id=params.platform_run_id,
                    wait_secs=wait,
                    reason=reason,
                    keep_partial=self._keep_partial,
                ),
            )
            polls += 1
            if result.stop_reason is not None:
                await self._ask_master_to_stop(params, result.stop_reason)
            if result.terminal:
                return result

    async def _ask_master_to_stop(self, params: PollerInput, reason: str) -> None:
        """The request was stopped (a budget is spent): the master stops every live child,
        this one included, by the abort cascade. Said after every poll until then, so a
        master restarted meanwhile (by the reconciler) hears it too."""
        if not params.parent_workflow_id:
            return
        master = workflow.get_external_workflow_handle(params.parent_workflow_id)
        try:
            await master.signal(STOP_REQUEST_SIGNAL, StopRequest(reason=reason))
        except Exception:
            # The master is gone; the reconciler restarts it and it stops the children then.
            workflow.logger.warning("could not ask the master of %s to stop", params.child_id)

    async def _next_look(
        self, params: PollerInput, first: bool, remaining: float
    ) -> tuple[str, int]:
        """Wait for a reason to look again: why, and how long the look may long-poll."""
        if first:
            return "first look", params.poll_long_wait_seconds
        try:
            await workflow.wait_condition(
                lambda: self._signalled,
                timeout=timedelta(seconds=min(params.poll_interval_seconds, remaining)),
            )
        except TimeoutError:
            return "interval", params.poll_long_wait_seconds
        return "webhook", 0

    async def _stop(self, params: PollerInput, state: ChildState, message: str) -> PollerResult:
        """Abort the platform run (caller abort, cap), keep its rows if the request does,
        then end the child in ``state``."""
        try:
            stopped = await calls.stop_child(params.child_id, state, message)
        except ActivityError as err:
            # The platform never confirmed the abort: we stop watching all the same.
            await calls.record_child_outcome(
                params.child_id, state, f"{message}; aborting the platform run failed: {err.cause}"
            )
            return PollerResult(child_id=params.child_id, state=state.value)
        ingest = stopped.ingest
        if ingest is None:
            return PollerResult(child_id=params.child_id, state=stopped.state)
        return await ingest_partial_rows(ingest, stopped.ingest_heartbeat_seconds)


@workflow.defn(name=POLLER_WORKFLOW)
class PollerWorkflow(_RunFollower):
    """The first poller type, kept for the runs started before ``PollerWorkflowV2`` (and
    their recorded histories): each step after the run's end is an activity or a signal of
    its own, and its behaviours since its first version are ``workflow.patched``."""

    @workflow.signal(name=PLATFORM_SIGNAL)
    def platform_signal(self, signal: PlatformSignal) -> None:
        self._signalled = True

    @workflow.run
    async def run(self, params: PollerInput) -> PollerResult:
        self._keep_partial = workflow.patched(PARTIAL_ROWS_PATCH)
        try:
            result = await self._follow(params)
        except asyncio.CancelledError:
            if self._keep_partial:
                result = await self._stop(params, ChildState.ABORTED, "aborted by the caller")
            else:
                aborted = await calls.abort_child(params.child_id)
                result = PollerResult(child_id=params.child_id, state=aborted.state)
        except ActivityError as err:
            # A cancel that reaches an activity before it started comes back as its error.
            if not (self._keep_partial and isinstance(err.cause, CancelledError)):
                raise
            result = await self._stop(params, ChildState.ABORTED, "aborted by the caller")
        if workflow.patched(SETTLE_USAGE_PATCH):
            await self._settle_usage(params)
        if workflow.patched(ROW_PUSH_PATCH):
            # Rows go to the callback (if the request asks) before the master hears of the
            # end, so its summary callback comes after every batch.
            await push_child_rows(params.child_id)
        await self._report(params, result)
        return result

    async def _follow(self, params: PollerInput) -> PollerResult:
        final = await self._poll_until_final(params)
        if final is None:
            return await self._timed_out(params)
        if workflow.patched(RELEASE_AT_RUN_END_PATCH):
            await self._release_slot(params)
        if final.partial_state is not None:
            partial = IngestInput(
                child_id=params.child_id,
                dataset_id=params.dataset_id,
                final_state=final.partial_state,
                final_message=final.status_message or None,
            )
            return await ingest_partial_rows(partial, params.ingest_heartbeat_seconds)
        if not final.succeeded:
            return PollerResult(
                child_id=params.child_id, state=final.child_state or ChildState.FAILED.value
            )
        return await self._ingest(params)

    async def _release_slot(self, params: PollerInput) -> None:
        """The platform run is over, so its slot of the account is free: give it back to
        admission now, not after the ingest and the usage settling (the master releases it
        again when the child ends; a second release changes nothing)."""
        handle = workflow.get_external_workflow_handle(
            admission_workflow_id(workflow.info().task_queue)
        )
        try:
            await handle.signal(RELEASE_SLOTS_SIGNAL, SlotRelease(child_ids=[params.child_id]))
        except Exception:  # no admission workflow: nothing is held (its leak guard agrees)
            workflow.logger.info("slot of %s not released early", params.child_id)

    async def _ingest(self, params: PollerInput) -> PollerResult:
        try:
            ingest = await calls.ingest_dataset(
                IngestInput(child_id=params.child_id, dataset_id=params.dataset_id),
                params.ingest_heartbeat_seconds,
            )
        except ActivityError as err:
            await calls.record_child_outcome(
                params.child_id, ChildState.FAILED, ingest_failure(str(err.cause), partial=False)
            )
            return PollerResult(child_id=params.child_id, state=ChildState.FAILED.value)
        return PollerResult(
            child_id=params.child_id, state=ChildState.SUCCEEDED.value, items=ingest.items
        )

    async def _timed_out(self, params: PollerInput) -> PollerResult:
        message = cap_message(params)
        if self._keep_partial:
            return await self._stop(params, ChildState.TIMED_OUT, message)
        if not workflow.patched(TIME_OUT_ABORTS_PATCH):
            await calls.record_child_outcome(params.child_id, ChildState.TIMED_OUT, message)
        else:
            try:
                await calls.time_out_child(params.child_id, message)
            except ActivityError as err:
                # The platform never confirmed the abort: we stop watching all the same.
                await calls.record_child_outcome(
                    params.child_id,
                    ChildState.TIMED_OUT,
                    f"{message}; aborting the platform run failed: {err.cause}",
                )
        return PollerResult(child_id=params.child_id, state=ChildState.TIMED_OUT.value)


@workflow.defn(name=POLLER_WORKFLOW_V2)
class PollerWorkflowV2(_RunFollower):
    """The poller of every child started since ``POLLER_BY_START_PATCH`` (its start activity
    starts it): every behaviour of ``PollerWorkflow`` without a patch marker (each costs two
    history events and a visibility write per poller), and once the run is over one
    ``finish_child`` activity releases the slot, ingests, settles the usage and tells the
    master, instead of two signals and three activities."""

    def __init__(self) -> None:
        super().__init__()
        # What the look that found the run over did to end the child (``look_and_finish``),
        # or why that failed for good.
        self._ended: FinishChildResult | None = None
        self._end_failure: str | None = None

    @workflow.signal(name=PLATFORM_SIGNAL)
    def platform_signal(self, signal: PlatformSignal) -> None:
        self._signalled = True

    async def _look(self, params: PollerInput, look: PollInput) -> PollResult:
        """Read the status and, if the run is over, end the child in the same activity:
        one activity and one workflow task per child fewer. If that activity fails for
        good, the look is made again alone and the child ended by ``finish_child`` (whose
        failure is recorded as the child's), as if it had never been tried."""
        try:
            looked = await calls.look_and_finish(
                LookInput(
                    poll=look,
                    dataset_id=params.dataset_id,
                    parent_workflow_id=params.parent_workflow_id,
                ),
                params.ingest_heartbeat_seconds,
            )
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                raise
            workflow.logger.warning("look_and_finish of %s failed: %s", params.child_id, err)
            return await calls.poll_platform_run(look)
        self._ended, self._end_failure = looked.finished, looked.failure
        return looked.poll

    @workflow.run
    async def run(self, params: PollerInput) -> PollerResult:
        self._keep_partial = True
        settled = False
        try:
            final = await self._poll_until_final(params)
            if final is None:
                message = cap_message(params)
                result = await self._stop(params, ChildState.TIMED_OUT, message)
            else:
                finished: FinishChildResult | None = None
                if self._ended is not None:
                    finished = self._ended
                    result = PollerResult(
                        params.child_id, state=finished.state, items=finished.items
                    )
                elif self._end_failure is not None:
                    result = await self._ended_by_failure(params, final, self._end_failure)
                else:
                    result, finished = await self._finish(params, final)
                if finished is not None and finished.told_master:
                    return result
                settled = finished is not None and finished.usage_settled
        except asyncio.CancelledError:
            result = await self._stop(params, ChildState.ABORTED, "aborted by the caller")
        except ActivityError as err:
            # A cancel that reaches an activity before it started comes back as its error.
            if not isinstance(err.cause, CancelledError):
                raise
            result = await self._stop(params, ChildState.ABORTED, "aborted by the caller")
        if not settled:
            await self._settle_usage(params)
        # Rows go to the callback (if the request asks) before the master hears of the end,
        # so its summary callback comes after every batch.
        await push_child_rows(params.child_id)
        await self._report(params, result)
        return result

    async def _finish(
        self, params: PollerInput, final: PollResult
    ) -> tuple[PollerResult, FinishChildResult | None]:
        """End the child in one activity (which may have told the master already); None
        for that activity's result when it failed for good and the child was ended here."""
        try:
            done = await calls.finish_child(
                FinishChildInput.after(
                    final,
                    child_id=params.child_id,
                    dataset_id=params.dataset_id,
                    parent_workflow_id=params.parent_workflow_id,
                ),
                params.ingest_heartbeat_seconds,
            )
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                raise
            return await self._ended_by_failure(params, final, str(err.cause)), None
        return PollerResult(child_id=params.child_id, state=done.state, items=done.items), done

    async def _ended_by_failure(
        self, params: PollerInput, final: PollResult, cause: str
    ) -> PollerResult:
        """Ending the child failed for good (its ingest, mostly): it ends all the same, in
        its run's state (failed if the run succeeded), the failure in its message."""
        partial = final.partial_state
        state = ChildState(partial or ChildState.FAILED)
        reason = ingest_failure(
            cause, partial=partial is not None, run_message=final.status_message or None
        )
        await calls.record_child_outcome(params.child_id, state, reason)
        return PollerResult(child_id=params.child_id, state=state.value)


def ingest_failure(cause: str, *, partial: bool, run_message: str | None = None) -> str:
    """The status message of a child whose ingest failed for good: of partial rows after
    the run's own message (if any), or of a succeeded run's dataset."""
    if not partial:
        return f"ingesting the dataset failed: {cause}"
    reason = f"ingesting its partial rows failed: {cause}"
    return f"{run_message}; {reason}" if run_message else reason


def cap_message(params: PollerInput) -> str:
    """Why a child past its cap ended ``timed_out``."""
    return f"no final status from the platform within {params.cap_seconds:.0f} s"


async def ingest_partial_rows(ingest: IngestInput, heartbeat_seconds: float) -> PollerResult:
    """Ingest the rows of a run that did not succeed, then (in the same activity) record its
    final state. If the ingest fails, the child still ends in that state, with the rows
    stored so far; the failure is in its status message and events. Shared with the
    master's abort sweep (children without a poller)."""
    state = ChildState(ingest.final_state or ChildState.FAILED)
    try:
        result = await calls.ingest_dataset(ingest, heartbeat_seconds)
    except ActivityError as err:
        if isinstance(err.cause, CancelledError):
            raise  # the caller aborted meanwhile: the cancel path stops and ingests again
        message = ingest_failure(str(err.cause), partial=True, run_message=ingest.final_message)
        await calls.record_child_outcome(ingest.child_id, state, message)
        return PollerResult(child_id=ingest.child_id, state=state.value)
    return PollerResult(child_id=ingest.child_id, state=state.value, items=result.items)
