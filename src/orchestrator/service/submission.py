"""Submitting a request: validate against the registry, store it, start its workflow.

Everything is checked before anything is written, and the header and all children are
written in one transaction, so a rejected request leaves nothing behind. The workflow id is
derived from the run id, so starting it again (a retried call) finds the same execution.
"""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy import Engine, delete
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from orchestrator.api.schemas import CreateRunRequest
from orchestrator.db.queries import registry
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.schema import scrape_children, scrape_events, scrape_runs
from orchestrator.domain.errors import UnknownActor
from orchestrator.domain.ids import child_id, new_run_id, orchestrator_workflow_id
from orchestrator.workflows.scraper import ORCHESTRATOR_WORKFLOW
from orchestrator.workflows.types import OrchestratorInput

log = logging.getLogger(__name__)


class WorkflowStartFailed(Exception):
    """Temporal did not accept the workflow; the request was rolled back."""


def build_run(body: CreateRunRequest, actors: dict[str, registry.ActorEntry]) -> run_queries.NewRun:
    """The rows for a request, or :class:`UnknownActor` naming the first unknown actor."""
    run_id = new_run_id()
    children = []
    for index, spec in enumerate(body.runs):
        entry = actors.get(spec.actor)
        if entry is None:
            raise UnknownActor(
                f"actor {spec.actor!r} is not registered; known actors: "
                + ", ".join(sorted(actors)),
                field=f"/runs/{index}/actor",
            )
        children.append(
            run_queries.NewChild(
                id=child_id(run_id, index),
                idx=index,
                actor=spec.actor,
                platform_actor_id=entry.platform_actor_id,
                input=spec.input,
                options=spec.options.merged_with(
                    entry.defaults.model_dump(by_alias=True, exclude_none=True)
                ),
            )
        )
    return run_queries.NewRun(
        id=run_id,
        workspace_id=body.workspace_id,
        conversation_id=body.conversation_id,
        skill_run_id=body.skill_id,
        callback_url=body.callback_webhook,
        children=tuple(children),
    )


async def submit_request(
    engine: Engine, temporal: Client, task_queue: str, body: CreateRunRequest
) -> run_queries.RunRecord:
    def store() -> run_queries.RunRecord:
        with engine.begin() as conn:
            run = build_run(body, registry.list_actors(conn))
            run_queries.insert_run(conn, run)
            record = run_queries.get_run(conn, run.id)
            assert record is not None
            return record

    record = await asyncio.to_thread(store)
    child_ids = [child_id(record.id, i) for i in range(record.children_total)]
    try:
        await temporal.start_workflow(
            ORCHESTRATOR_WORKFLOW,
            OrchestratorInput(run_id=record.id, child_ids=child_ids),
            id=orchestrator_workflow_id(record.id),
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
    except Exception as exc:
        log.exception("could not start the workflow of %s; rolling the request back", record.id)
        await asyncio.to_thread(_forget, engine, record.id)
        raise WorkflowStartFailed(str(exc)) from exc
    return record


def _forget(engine: Engine, run_id: str) -> None:
    with engine.begin() as conn:
        conn.execute(delete(scrape_events).where(scrape_events.c.run_id == run_id))
        conn.execute(delete(scrape_children).where(scrape_children.c.run_id == run_id))
        conn.execute(delete(scrape_runs).where(scrape_runs.c.id == run_id))
