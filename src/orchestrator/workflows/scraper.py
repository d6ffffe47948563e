"""``ScraperOrchestrator``: the master workflow of one request.

It spawns every child in parallel (activity ``start_actor_run``), starts one
``PollerWorkflow`` per started child, waits for all of them, and finalises the request.
A child whose start fails for good is recorded as failed without blocking its siblings.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from orchestrator.domain.ids import poller_workflow_id
    from orchestrator.domain.lifecycle import ChildState
    from orchestrator.workflows import policies
    from orchestrator.workflows.poller import PollerWorkflow
    from orchestrator.workflows.types import (
        ChildOutcomeInput,
        FinalizeInput,
        FinalizeResult,
        OrchestratorInput,
        OrchestratorResult,
        PollerInput,
        PollerResult,
        StartChildInput,
        StartChildResult,
    )

ORCHESTRATOR_WORKFLOW = "ScraperOrchestrator"


@workflow.defn(name=ORCHESTRATOR_WORKFLOW)
class ScraperOrchestrator:
    @workflow.run
    async def run(self, params: OrchestratorInput) -> OrchestratorResult:
        await asyncio.gather(*(self._child(params.run_id, cid) for cid in params.child_ids))
        final: FinalizeResult = await workflow.execute_activity(
            "finalize_run",
            FinalizeInput(run_id=params.run_id),
            result_type=FinalizeResult,
            start_to_close_timeout=policies.DB_TIMEOUT,
            retry_policy=policies.DB_RETRY,
        )
        return OrchestratorResult(run_id=params.run_id, state=final.state)

    async def _child(self, run_id: str, child_id: str) -> PollerResult | None:
        try:
            started: StartChildResult = await workflow.execute_activity(
                "start_actor_run",
                StartChildInput(child_id=child_id),
                result_type=StartChildResult,
                start_to_close_timeout=policies.START_TIMEOUT,
                schedule_to_close_timeout=policies.START_SCHEDULE_TO_CLOSE,
                retry_policy=policies.START_RETRY,
            )
        except ActivityError as err:
            await self._fail(child_id, f"could not start the actor run: {_cause(err)}")
            return None
        if not started.started or started.platform_run_id is None or started.dataset_id is None:
            return None
        try:
            return await self._follow(run_id, child_id, started)
        except ChildWorkflowError as err:
            await self._fail(child_id, f"tracking the actor run failed: {_cause(err)}")
            return None

    async def _fail(self, child_id: str, message: str) -> None:
        await workflow.execute_activity(
            "record_child_outcome",
            ChildOutcomeInput(child_id=child_id, state=ChildState.FAILED.value, message=message),
            start_to_close_timeout=policies.DB_TIMEOUT,
            retry_policy=policies.DB_RETRY,
        )

    async def _follow(self, run_id: str, child_id: str, started: StartChildResult) -> PollerResult:
        assert started.platform_run_id is not None and started.dataset_id is not None
        return await workflow.execute_child_workflow(
            PollerWorkflow.run,
            PollerInput(
                run_id=run_id,
                child_id=child_id,
                platform_run_id=started.platform_run_id,
                dataset_id=started.dataset_id,
                cap_seconds=started.cap_seconds,
                poll_interval_seconds=started.poll_interval_seconds,
            ),
            id=poller_workflow_id(child_id),
            parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
        )


def _cause(err: BaseException) -> str:
    """The innermost failure message of an activity or child-workflow error."""
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err)
