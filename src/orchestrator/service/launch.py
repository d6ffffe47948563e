"""Starting a request's master workflow: the one place that knows its id, input and policy.

Used by submission and by the reconciler. ``USE_EXISTING`` makes a start idempotent: a
running workflow with the request's id is the one we wanted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from orchestrator.domain.chaining import StepSource, dependencies
from orchestrator.domain.ids import child_id, orchestrator_workflow_id
from orchestrator.workflows.scraper import ORCHESTRATOR_WORKFLOW
from orchestrator.workflows.types import OrchestratorInput


def step_graph(
    run_id: str, input_from: Sequence[Mapping[str, StepSource] | None]
) -> dict[str, list[str]]:
    """The master's ``depends_on`` (child id -> the child ids it takes rows from), from each
    run's sources by index: submission builds it from the request, the reconciler from the
    stored children, so a restarted master waits for the same runs."""
    return {
        child_id(run_id, index): [child_id(run_id, source) for source in sources]
        for index, sources in dependencies(input_from).items()
    }


async def start_request_workflow(
    client: Client,
    task_queue: str,
    run_id: str,
    child_ids: Sequence[str],
    depends_on: Mapping[str, Sequence[str]] | None = None,
) -> None:
    await client.start_workflow(
        ORCHESTRATOR_WORKFLOW,
        OrchestratorInput(
            run_id=run_id,
            child_ids=list(child_ids),
            depends_on={cid: list(srcs) for cid, srcs in (depends_on or {}).items()},
        ),
        id=orchestrator_workflow_id(run_id),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
