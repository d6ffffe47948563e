"""Starting a request's master workflow: the one place that knows its id, input and policy.

Used by submission and by the reconciler. ``USE_EXISTING`` makes a start idempotent: a
running workflow with the request's id is the one we wanted.
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from orchestrator.domain.ids import orchestrator_workflow_id
from orchestrator.workflows.scraper import ORCHESTRATOR_WORKFLOW
from orchestrator.workflows.types import OrchestratorInput


async def start_request_workflow(
    client: Client, task_queue: str, run_id: str, child_ids: Sequence[str]
) -> None:
    await client.start_workflow(
        ORCHESTRATOR_WORKFLOW,
        OrchestratorInput(run_id=run_id, child_ids=list(child_ids)),
        id=orchestrator_workflow_id(run_id),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
