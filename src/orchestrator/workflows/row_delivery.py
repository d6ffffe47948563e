"""Pushing a final child's rows to the callback: ``push_child_rows`` and ``RowDeliveryWorkflow``.

The poller of a child calls ``push_child_rows`` once the child is final (rows ingested,
usage settled) and before it reports to its master, so the master's summary callback comes
after every batch of every child was delivered or given up; the master calls it for a child
its abort sweep ingested (one that never got a poller). The first batch is sent by an
activity in the poller itself: a request that does not push rows (or a child without rows)
costs one activity and no more. When more batches follow, a ``RowDeliveryWorkflow`` (id
``rows/<child id>``) sends them one at a time, in order, continuing-as-new every
``BATCHES_PER_RUN`` batches so its history stays small however many rows there are.

Nothing here knows where a batch starts: the activity reads the child's cursor from the
database (``row_deliveries``), so payloads are the child id and a few counts, and a restart
anywhere resumes at the last acknowledged batch. A batch given up ends that child's push; it
never changes the child's or the request's state.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from temporalio import workflow
from temporalio.exceptions import ActivityError, WorkflowAlreadyStartedError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.row_delivery import RowDeliveryActivities
    from orchestrator.workflows import policies
    from orchestrator.workflows.types import PushRowsInput, PushRowsResult

ROW_DELIVERY_WORKFLOW = "RowDeliveryWorkflow"
# Pollers from here on push the child's rows (requests with deliver.rows=callback) before
# they report; histories from before replay without it.
ROW_PUSH_PATCH = "push-rows-to-callback"
BATCHES_PER_RUN = 100


@dataclass(frozen=True)
class RowDeliveryInput:
    child_id: str


@dataclass(frozen=True)
class RowDeliveryResult:
    child_id: str
    batches_pushed: int = 0
    rows_pushed: int = 0
    #: The push ended on a batch that could not be delivered.
    gave_up: bool = False


def row_delivery_workflow_id(child_id: str) -> str:
    return f"rows/{child_id}"


async def push_row_batch(child_id: str) -> PushRowsResult:
    return await workflow.execute_activity_method(
        RowDeliveryActivities.push_row_batch,
        PushRowsInput(child_id=child_id),
        start_to_close_timeout=policies.ROWS_TIMEOUT,
        retry_policy=policies.ROWS_RETRY,
        # On abort, let an attempt in flight finish (and record its outcome) before the
        # push stops.
        cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    )


async def _push_batches(child_id: str, limit: int | None) -> tuple[PushRowsResult | None, bool]:
    """Send batches until none is left (or ``limit`` were sent): the last result, and
    whether the push gave up on a batch."""
    result: PushRowsResult | None = None
    sent = 0
    while limit is None or sent < limit:
        try:
            result = await push_row_batch(child_id)
        except ActivityError as err:
            workflow.logger.warning("rows of %s not pushed further: %s", child_id, err.cause)
            return result, True
        sent += 1
        if result.done:
            break
    return result, False


async def push_child_rows(child_id: str) -> None:
    """Push a final child's rows (if its request asks for it); returns when every batch was
    delivered or the push gave up. Never raises for delivery problems, nor for a cancel
    (the request was aborted meanwhile): the push stops there and the caller goes on to
    report, the rows still in the database."""
    try:
        first, gave_up = await _push_batches(child_id, limit=1)
        if gave_up or first is None or first.done:
            return
        try:
            await workflow.execute_child_workflow(
                RowDeliveryWorkflow.run,
                RowDeliveryInput(child_id=child_id),
                id=row_delivery_workflow_id(child_id),
            )
        except WorkflowAlreadyStartedError:
            # A run of it from before a restart of this poller is still sending: the cursor
            # is shared, so send whatever it leaves here (nothing, once it is done).
            await _push_batches(child_id, limit=None)
    except asyncio.CancelledError:
        workflow.logger.info("row delivery of %s stopped: the request was aborted", child_id)
    except Exception as err:  # a failed or terminated delivery changes no state
        workflow.logger.warning("row delivery of %s ended early: %s", child_id, err)


@workflow.defn(name=ROW_DELIVERY_WORKFLOW)
class RowDeliveryWorkflow:
    @workflow.run
    async def run(self, params: RowDeliveryInput) -> RowDeliveryResult:
        result, gave_up = await _push_batches(params.child_id, limit=BATCHES_PER_RUN)
        if not gave_up and result is not None and not result.done:
            workflow.continue_as_new(params)  # more batches: a fresh, small history
        return RowDeliveryResult(
            child_id=params.child_id,
            batches_pushed=result.batches_pushed if result else 0,
            rows_pushed=result.rows_pushed if result else 0,
            gave_up=gave_up,
        )
