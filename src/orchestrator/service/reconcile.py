"""Drift repair: find requests whose database state and workflow state disagree, and fix them.

The database is the read model and Temporal holds execution; they can drift apart when a
workflow is terminated by hand, fails on a bug, or a poller is lost. Every few minutes (a
Temporal schedule runs ``ReconcilerWorkflow``, whose activity calls :func:`reconcile`) every
unfinished request is looked at, and:

- its master workflow is restarted when it is no longer running (its activities are
  idempotent, so a new run picks up where the old one stopped and learns the children's
  states);
- the poller of a started, unfinished child that has none is restarted, following the
  child's plan (``domain.follow.follow_plan``, as on the start path), and reports to the
  master by signal when done.

Recently changed children are left alone, since their poller may simply not exist yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Concatenate, ParamSpec, TypeVar

from sqlalchemy import Connection, Engine
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from orchestrator.db.engine import read_only
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.queries._common import utcnow
from orchestrator.db.queries.events import append_event
from orchestrator.domain.chaining import StepSource
from orchestrator.domain.follow import FollowSettings, follow_plan
from orchestrator.domain.ids import orchestrator_workflow_id, poller_workflow_id
from orchestrator.service.launch import start_request_workflow, step_graph
from orchestrator.workflows.poller_start import start_poller
from orchestrator.workflows.types import PollerInput, ReconcileResult

P = ParamSpec("P")
T = TypeVar("T")

# A child changed this recently may be between its start and its poller: not drift yet.
DEFAULT_GRACE = timedelta(seconds=60)


@dataclass(frozen=True)
class Reconciler:
    engine: Engine
    client: Client
    task_queue: str
    follow: FollowSettings
    grace: timedelta = DEFAULT_GRACE

    async def _read(
        self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        def run() -> T:
            with read_only(self.engine).connect() as conn:
                return fn(conn, *args, **kwargs)

        return await asyncio.to_thread(run)

    async def _note(self, run_id: str, child_id: str | None, kind: str, message: str) -> None:
        def run() -> None:
            with self.engine.begin() as conn:
                append_event(conn, run_id, kind, message, child_id=child_id)

        await asyncio.to_thread(run)

    async def _is_running(self, workflow_id: str) -> bool:
        try:
            description = await self.client.get_workflow_handle(workflow_id).describe()
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                return False
            raise
        return description.status is WorkflowExecutionStatus.RUNNING

    async def _repair_master(self, run_id: str, children: list[run_queries.ChildRecord]) -> bool:
        """Restart the request's master if it is not running; whether it was restarted."""
        if await self._is_running(orchestrator_workflow_id(run_id)):
            return False
        # Chained runs wait for the same sources as before (the stored children say which).
        graph = step_graph(
            run_id,
            [
                {n: StepSource.from_stored(d) for n, d in c.input_from.items()}
                if c.input_from
                else None
                for c in children
            ],
        )
        await start_request_workflow(
            self.client, self.task_queue, run_id, [c.id for c in children], graph
        )
        await self._note(
            run_id,
            None,
            "reconcile.master_restarted",
            "the request's workflow was not running; restarted it",
        )
        return True

    async def _repair_poller(self, run_id: str, child: run_queries.ChildRecord) -> bool:
        """Restart the poller of a started child that has none; whether one was started."""
        if (
            child.state.terminal
            or child.platform_run_id is None
            or child.dataset_id is None
            or child.updated_at > utcnow() - self.grace
            or await self._is_running(poller_workflow_id(child.id))
        ):
            return False
        await start_poller(
            self.client,
            self.task_queue,
            PollerInput.following(
                follow_plan(child.options, self.follow),
                run_id=run_id,
                child_id=child.id,
                platform_run_id=child.platform_run_id,
                dataset_id=child.dataset_id,
                parent_workflow_id=orchestrator_workflow_id(run_id),
            ),
        )
        await self._note(
            run_id,
            child.id,
            "reconcile.poller_restarted",
            f"actor run {child.idx} had no poller; started one",
        )
        return True

    async def reconcile(self) -> ReconcileResult:
        """One pass over every unfinished request."""
        checked = masters = pollers = 0
        for run_id in await self._read(run_queries.unfinished_run_ids):
            checked += 1
            children = await self._read(run_queries.get_children, run_id)
            if await self._repair_master(run_id, children):
                masters += 1
                continue
            for child in children:
                if await self._repair_poller(run_id, child):
                    pollers += 1
        return ReconcileResult(
            checked=checked, masters_restarted=masters, pollers_restarted=pollers
        )
