"""``ScraperOrchestrator``: the master workflow of one request.

It spawns every child in parallel (activity ``start_actor_run``), starts one
``PollerWorkflow`` per started child, waits until every child has finished, and finalises
the request. A child whose start fails for good is recorded as failed without blocking its
siblings.

Pollers are started with ``ParentClosePolicy.ABANDON`` and report back by the
``child_finished`` signal instead of being awaited: a poller then outlives a master that was
terminated or restarted (by the reconciler), and a new master run simply learns of it
again. A child already terminal in the database counts as finished at once.
"""

from __future__ import annotations

import asyncio
import contextlib

from temporalio import workflow
from temporalio.exceptions import ActivityError, WorkflowAlreadyStartedError
from temporalio.workflow import ActivityCancellationType, ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from orchestrator.domain.ids import poller_workflow_id
    from orchestrator.domain.lifecycle import ChildState
    from orchestrator.workflows import policies
    from orchestrator.workflows.poller import CHILD_FINISHED_SIGNAL, PollerWorkflow
    from orchestrator.workflows.types import (
        AbortChildInput,
        AbortChildResult,
        ChildFinished,
        ChildOutcomeInput,
        DeliverCallbackInput,
        DeliverCallbackResult,
        FinalizeInput,
        FinalizeResult,
        OrchestratorInput,
        OrchestratorResult,
        PollerInput,
        StartChildInput,
        StartChildResult,
    )

ORCHESTRATOR_WORKFLOW = "ScraperOrchestrator"


@workflow.defn(name=ORCHESTRATOR_WORKFLOW)
class ScraperOrchestrator:
    def __init__(self) -> None:
        self._finished: dict[str, str] = {}
        self._pollers: set[str] = set()

    @workflow.signal(name=CHILD_FINISHED_SIGNAL)
    def child_finished(self, done: ChildFinished) -> None:
        self._finished[done.child_id] = done.state

    @workflow.query(name="children_finished")
    def children_finished(self) -> int:
        return len(self._finished)

    @workflow.run
    async def run(self, params: OrchestratorInput) -> OrchestratorResult:
        expected = set(params.child_ids)
        try:
            await asyncio.gather(*(self._spawn(params.run_id, cid) for cid in params.child_ids))
            await workflow.wait_condition(lambda: expected <= self._finished.keys())
        except asyncio.CancelledError:
            await self._abort(params)
        final: FinalizeResult = await workflow.execute_activity(
            "finalize_run",
            FinalizeInput(run_id=params.run_id),
            result_type=FinalizeResult,
            start_to_close_timeout=policies.DB_TIMEOUT,
            retry_policy=policies.DB_RETRY,
        )
        if final.deliver_callback:
            await self._deliver_callback(params.run_id)
        return OrchestratorResult(run_id=params.run_id, state=final.state)

    async def _deliver_callback(self, run_id: str) -> None:
        """Tell the caller (signed callback), retried on CALLBACK_RETRY; a callback that
        cannot be delivered is recorded in the events and does not change the run's state."""
        try:
            await workflow.execute_activity(
                "deliver_callback",
                DeliverCallbackInput(run_id=run_id),
                result_type=DeliverCallbackResult,
                start_to_close_timeout=policies.CALLBACK_TIMEOUT,
                retry_policy=policies.CALLBACK_RETRY,
            )
        except ActivityError as err:
            workflow.logger.warning("callback of %s not delivered: %s", run_id, _cause(err))

    async def _spawn(self, run_id: str, child_id: str) -> None:
        try:
            started: StartChildResult = await workflow.execute_activity(
                "start_actor_run",
                StartChildInput(child_id=child_id),
                result_type=StartChildResult,
                start_to_close_timeout=policies.START_TIMEOUT,
                schedule_to_close_timeout=policies.START_SCHEDULE_TO_CLOSE,
                retry_policy=policies.START_RETRY,
                # On abort, let a start in flight finish so its run is known and aborted.
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        except ActivityError as err:
            await self._record_failed(child_id, f"could not start the actor run: {_cause(err)}")
            self._finished[child_id] = ChildState.FAILED.value
            return
        if not started.started or started.platform_run_id is None or started.dataset_id is None:
            # Already terminal (failed to start, or finished before a restart of this run).
            self._finished.setdefault(child_id, "terminal")
            return
        # A poller from before a restart may still be following it; it will report here.
        with contextlib.suppress(WorkflowAlreadyStartedError):
            await workflow.start_child_workflow(
                PollerWorkflow.run,
                PollerInput(
                    run_id=run_id,
                    child_id=child_id,
                    platform_run_id=started.platform_run_id,
                    dataset_id=started.dataset_id,
                    cap_seconds=started.cap_seconds,
                    poll_interval_seconds=started.poll_interval_seconds,
                    poll_long_wait_seconds=started.poll_long_wait_seconds,
                    polls_per_workflow_run=started.polls_per_workflow_run,
                    ingest_heartbeat_seconds=started.ingest_heartbeat_seconds,
                    parent_workflow_id=workflow.info().workflow_id,
                ),
                id=poller_workflow_id(child_id),
                parent_close_policy=ParentClosePolicy.ABANDON,
            )
        self._pollers.add(child_id)

    async def _abort(self, params: OrchestratorInput) -> None:
        """The caller aborted: cancel the pollers (each aborts its platform run), and sweep
        every child, since one may be between its start and its poller."""
        for child_id in self._pollers:
            if child_id not in self._finished:
                handle = workflow.get_external_workflow_handle(poller_workflow_id(child_id))
                try:
                    await handle.cancel()
                except Exception:  # the poller may have just finished; the sweep covers it
                    workflow.logger.info("poller of %s could not be cancelled", child_id)
        await asyncio.gather(
            *(
                workflow.execute_activity(
                    "abort_child",
                    AbortChildInput(child_id=cid),
                    result_type=AbortChildResult,
                    start_to_close_timeout=policies.ABORT_TIMEOUT,
                    retry_policy=policies.ABORT_RETRY,
                )
                for cid in params.child_ids
            )
        )

    async def _record_failed(self, child_id: str, message: str) -> None:
        await workflow.execute_activity(
            "record_child_outcome",
            ChildOutcomeInput(child_id=child_id, state=ChildState.FAILED.value, message=message),
            start_to_close_timeout=policies.DB_TIMEOUT,
            retry_policy=policies.DB_RETRY,
        )


def _cause(err: BaseException) -> str:
    """The innermost failure message of an activity error."""
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err)
