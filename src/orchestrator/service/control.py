"""Aborting a request: flag it in the database, then cancel its workflow.

The flag comes first so a child that has not been started yet is never started; the
cancellation then reaches the master, which cancels the pollers (each aborts its platform
run and confirms the final status) and sweeps every child.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sqlalchemy import Engine
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from orchestrator.db.queries import runs as run_queries
from orchestrator.domain.errors import NotFound
from orchestrator.domain.ids import orchestrator_workflow_id
from orchestrator.service.errors import EngineUnavailable


@dataclass(frozen=True)
class AbortOutcome:
    run: run_queries.RunRecord
    accepted: bool


async def abort_request(
    engine: Engine, temporal: Client | None, run_id: str, *, workspace_id: str | None = None
) -> AbortOutcome:
    """Abort ``run_id``; with ``workspace_id`` only if the run belongs to that workspace
    (another workspace's run is reported as missing, and nothing is changed)."""
    if temporal is None:
        raise EngineUnavailable("Temporal is not connected")

    def flag() -> tuple[run_queries.RunRecord | None, bool]:
        with engine.begin() as conn:
            existing = run_queries.get_run(conn, run_id)
            if existing is None or (
                workspace_id is not None and existing.workspace_id != workspace_id
            ):
                return None, False
            changed = run_queries.mark_aborted(conn, run_id)
            return run_queries.get_run(conn, run_id), changed

    run, changed = await asyncio.to_thread(flag)
    if run is None:
        raise NotFound(f"run {run_id} does not exist", field="runId")
    if run.terminal:
        return AbortOutcome(run=run, accepted=False)
    try:
        await temporal.get_workflow_handle(orchestrator_workflow_id(run_id)).cancel()
    except RPCError as exc:
        if exc.status is not RPCStatusCode.NOT_FOUND:
            raise
    return AbortOutcome(run=run, accepted=changed or run.aborted)
