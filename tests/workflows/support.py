"""Helpers for workflow tests: submit a request, wait for conditions."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from sqlalchemy import select
from temporalio.service import RPCError

from orchestrator.api.schemas import CreateRunRequest
from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.schema import scrape_items
from orchestrator.domain.ids import orchestrator_workflow_id
from orchestrator.service import submission
from orchestrator.service.commands import SubmitRequest
from orchestrator.workflows.types import OrchestratorResult
from tests.support.waiting import eventually_async
from tests.workflows.conftest import Harness


def request(*runs: dict[str, Any]) -> SubmitRequest:
    return CreateRunRequest.model_validate(
        {
            "workspaceId": "ws_test",
            "skillId": "skill_1",
            "conversationId": "c_1",
            "runs": list(runs),
        }
    ).to_command()


async def submit(h: Harness, body: SubmitRequest) -> str:
    record = (await submission.submit(h.engine, h.env.client, h.task_queue, body)).run
    return record.id


async def result_of(h: Harness, run_id: str, timeout: float = 60) -> OrchestratorResult:
    handle = h.env.client.get_workflow_handle(
        orchestrator_workflow_id(run_id), result_type=OrchestratorResult
    )
    return await asyncio.wait_for(handle.result(), timeout=timeout)


async def run_to_end(h: Harness, body: SubmitRequest) -> tuple[str, OrchestratorResult]:
    run_id = await submit(h, body)
    return run_id, await result_of(h, run_id)


async def wait_for_workflow(h: Harness, workflow_id: str) -> None:
    """Until the workflow exists (a poller is started just after its child is running)."""

    async def exists() -> bool:
        await h.env.client.get_workflow_handle(workflow_id).describe()
        return True

    await eventually_async(exists, retry_on=(RPCError,), description=f"workflow {workflow_id}")


def header(h: Harness, run_id: str) -> run_queries.RunRecord:
    with h.engine.connect() as conn:
        run = run_queries.get_run(conn, run_id)
    assert run is not None
    return run


def children(h: Harness, run_id: str) -> list[run_queries.ChildRecord]:
    with h.engine.connect() as conn:
        return run_queries.get_children(conn, run_id)


def event_kinds(h: Harness, run_id: str) -> Counter[str]:
    with h.engine.connect() as conn:
        return Counter(e.kind for e in event_queries.list_events(conn, run_id, limit=10_000))


def stored_indexes(h: Harness, child_id: str) -> list[int]:
    with h.engine.connect() as conn:
        query = select(scrape_items.c.item_index).where(scrape_items.c.child_id == child_id)
        return sorted(conn.execute(query).scalars())


def transitions(h: Harness, run_id: str) -> list[str]:
    with h.engine.connect() as conn:
        events = event_queries.list_events(conn, run_id, limit=10_000)
    return [str(e.data["to"]) for e in events if e.kind == "child.state" and e.data]


def assert_kept(h: Harness, child: run_queries.ChildRecord, items: int) -> None:
    assert child.items_ingested == items and child.partial
    assert stored_indexes(h, child.id) == list(range(items))
