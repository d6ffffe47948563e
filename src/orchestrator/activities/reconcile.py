"""Drift repair: find requests whose database state and workflow state disagree, and fix them.

The database is the read model and Temporal holds execution; they can drift apart when a
workflow is terminated by hand, fails on a bug, or a poller is lost. Every few minutes (a
Temporal schedule runs ``ReconcilerWorkflow``) this activity looks at every unfinished
request and:

- restarts the master workflow when it is no longer running (its activities are idempotent,
  so a new run picks up where the old one stopped and learns the children's states);
- restarts the poller of a started, unfinished child that has none (it reports to the
  master by signal when done).

Recently changed children are left alone, since their poller may simply not exist yet.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import Engine, select
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from orchestrator.db.engine import read_only
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.queries._common import utcnow
from orchestrator.db.queries.events import append_event
from orchestrator.db.schema import scrape_runs
from orchestrator.domain.ids import orchestrator_workflow_id, poller_workflow_id
from orchestrator.service.launch import start_request_workflow
from orchestrator.workflows.poller import POLLER_WORKFLOW
from orchestrator.workflows.types import PollerInput, ReconcileResult

# A child changed this recently may be between its start and its poller: not drift yet.
DEFAULT_GRACE = timedelta(seconds=60)


async def _is_running(client: Client, workflow_id: str) -> bool:
    try:
        description = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return False
        raise
    return description.status is WorkflowExecutionStatus.RUNNING


def _unfinished_run_ids(engine: Engine) -> list[str]:
    with read_only(engine).connect() as conn:
        return list(
            conn.execute(
                select(scrape_runs.c.id).where(scrape_runs.c.finished_at.is_(None))
            ).scalars()
        )


async def reconcile(
    engine: Engine,
    client: Client,
    task_queue: str,
    *,
    cap_seconds: float,
    poll_interval_seconds: float,
    poll_long_wait_seconds: int = 10,
    polls_per_workflow_run: int = 500,
    grace: timedelta = DEFAULT_GRACE,
) -> ReconcileResult:
    """One pass over every unfinished request."""
    checked = masters = pollers = 0
    for run_id in await asyncio.to_thread(_unfinished_run_ids, engine):
        checked += 1
        with read_only(engine).connect() as conn:
            children = run_queries.get_children(conn, run_id)
        master_id = orchestrator_workflow_id(run_id)
        if not await _is_running(client, master_id):
            await start_request_workflow(client, task_queue, run_id, [c.id for c in children])
            await asyncio.to_thread(
                _note,
                engine,
                run_id,
                None,
                "reconcile.master_restarted",
                "the request's workflow was not running; restarted it",
            )
            masters += 1
            continue
        cutoff = utcnow() - grace
        for child in children:
            if (
                child.state.terminal
                or child.platform_run_id is None
                or child.dataset_id is None
                or child.updated_at > cutoff
                or await _is_running(client, poller_workflow_id(child.id))
            ):
                continue
            await client.start_workflow(
                POLLER_WORKFLOW,
                PollerInput(
                    run_id=run_id,
                    child_id=child.id,
                    platform_run_id=child.platform_run_id,
                    dataset_id=child.dataset_id,
                    cap_seconds=cap_seconds,
                    poll_interval_seconds=poll_interval_seconds,
                    poll_long_wait_seconds=poll_long_wait_seconds,
                    polls_per_workflow_run=polls_per_workflow_run,
                    parent_workflow_id=master_id,
                ),
                id=poller_workflow_id(child.id),
                task_queue=task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            )
            await asyncio.to_thread(
                _note,
                engine,
                run_id,
                child.id,
                "reconcile.poller_restarted",
                f"actor run {child.idx} had no poller; started one",
            )
            pollers += 1
    return ReconcileResult(checked=checked, masters_restarted=masters, pollers_restarted=pollers)


def _note(engine: Engine, run_id: str, child_id: str | None, kind: str, message: str) -> None:
    with engine.begin() as conn:
        append_event(conn, run_id, kind, message, child_id=child_id)


class ReconcileActivities:
    def __init__(
        self,
        engine: Engine,
        client: Client,
        task_queue: str,
        *,
        cap_seconds: float,
        poll_interval_seconds: float,
        poll_long_wait_seconds: int,
        polls_per_workflow_run: int,
    ) -> None:
        self._engine = engine
        self._client = client
        self._task_queue = task_queue
        self._cap = cap_seconds
        self._interval = poll_interval_seconds
        self._long_wait = poll_long_wait_seconds
        self._polls = polls_per_workflow_run

    @activity.defn(name="reconcile_drift")
    async def reconcile_drift(self) -> ReconcileResult:
        result = await reconcile(
            self._engine,
            self._client,
            self._task_queue,
            cap_seconds=self._cap,
            poll_interval_seconds=self._interval,
            poll_long_wait_seconds=self._long_wait,
            polls_per_workflow_run=self._polls,
        )
        if result.masters_restarted or result.pollers_restarted:
            activity.logger.warning(
                "reconciler repaired drift: %d master(s), %d poller(s) restarted",
                result.masters_restarted,
                result.pollers_restarted,
            )
        return result
