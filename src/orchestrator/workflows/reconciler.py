"""``ReconcilerWorkflow``: one drift-repair pass, started by a Temporal schedule.

A schedule (rather than a loop in some process) means exactly one pass runs at a time
across any number of workers, and it survives restarts like any other workflow.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.reconcile import ReconcileActivities
    from orchestrator.workflows import policies
    from orchestrator.workflows.types import ReconcileResult

RECONCILER_WORKFLOW = "ReconcilerWorkflow"
RECONCILE_SCHEDULE_ID = "orchestrator-reconciler"


@workflow.defn(name=RECONCILER_WORKFLOW)
class ReconcilerWorkflow:
    @workflow.run
    async def run(self) -> ReconcileResult:
        return await workflow.execute_activity_method(
            ReconcileActivities.reconcile_drift,
            start_to_close_timeout=policies.RECONCILE_TIMEOUT,
            retry_policy=policies.RECONCILE_RETRY,
        )
