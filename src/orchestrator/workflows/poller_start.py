"""Starting a child's ``PollerWorkflow`` from outside a workflow: the one place that knows its
id, input and conflict policy.

Used by the start activity (the master's children since ``POLLER_BY_START_PATCH``) and by
the reconciler. It imports no workflow code, so activities can use it without a cycle.
``USE_EXISTING`` makes the start idempotent: a running poller of the child (a retried
start, a continued-as-new run) is the one we wanted.
"""

from __future__ import annotations

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from orchestrator.domain.ids import poller_workflow_id
from orchestrator.workflows.types import PollerInput

POLLER_WORKFLOW = "PollerWorkflow"
#: Every poller started from here on is of this type (workflows/poller.py says why).
POLLER_WORKFLOW_V2 = "PollerWorkflowV2"


async def start_poller(client: Client, task_queue: str, params: PollerInput) -> None:
    await client.start_workflow(
        POLLER_WORKFLOW_V2,
        params,
        id=poller_workflow_id(params.child_id),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
