"""Drift repair: drift is created on purpose, then one reconciler pass repairs it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio.service import RPCError

from orchestrator.activities.reconcile import reconcile
from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries import items as item_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.domain.ids import child_id, orchestrator_workflow_id, poller_workflow_id
from orchestrator.domain.lifecycle import ChildState, RunState
from orchestrator.worker import ensure_reconcile_schedule
from orchestrator.workflows.reconciler import RECONCILE_SCHEDULE_ID
from tests.workflows.conftest import Harness
from tests.workflows.fakes import Script
from tests.workflows.support import eventually, request, result_of, submit


def child_states(h: Harness, run_id: str) -> list[ChildState]:
    with h.engine.connect() as conn:
        return [c.state for c in run_queries.get_children(conn, run_id)]


async def repair(h: Harness) -> tuple[int, int]:
    result = await reconcile(
        h.engine,
        h.env.client,
        h.task_queue,
        cap_seconds=600,
        poll_interval_seconds=1,
        poll_long_wait_seconds=0,
        grace=timedelta(0),
    )
    return result.masters_restarted, result.pollers_restarted


async def test_a_master_that_ended_while_the_database_says_running_is_restarted(
    harness: Harness,
) -> None:
    harness.platform.scripts["ultron~leadgen"] = Script(items=9, polls_to_finish=6)
    run_id = await submit(
        harness, request({"actor": "ultron-leadgen"}, {"actor": "ultron-leadgen"})
    )
    await eventually(lambda: child_states(harness, run_id) == [ChildState.RUNNING] * 2)
    await harness.env.client.get_workflow_handle(orchestrator_workflow_id(run_id)).terminate(
        "drift on purpose"
    )
    assert await repair(harness) == (1, 0)
    assert (await result_of(harness, run_id)).state == RunState.SUCCEEDED
    with harness.engine.connect() as conn:
        run = run_queries.get_run(conn, run_id)
        assert run is not None and run.state is RunState.SUCCEEDED and run.terminal
        assert item_queries.count_items(conn, run_id) == 18
        kinds = [e.kind for e in event_queries.list_events(conn, run_id, limit=1000)]
    assert kinds.count("reconcile.master_restarted") == 1
    assert len(harness.platform.runs) == 2, "restarting the master started platform runs again"
    # Nothing left to repair.
    assert await repair(harness) == (0, 0)


async def test_a_child_without_a_poller_gets_one(harness: Harness) -> None:
    harness.platform.scripts["ultron~leadgen"] = Script(items=4, polls_to_finish=5)
    run_id = await submit(harness, request({"actor": "ultron-leadgen"}))
    await eventually(lambda: child_states(harness, run_id) == [ChildState.RUNNING])
    poller = harness.env.client.get_workflow_handle(poller_workflow_id(child_id(run_id, 0)))
    for _ in range(200):  # the child is running just before its poller is started
        try:
            await poller.describe()
            break
        except RPCError:
            await asyncio.sleep(0.05)
    await poller.terminate("drift on purpose")
    assert await repair(harness) == (0, 1)
    assert (await result_of(harness, run_id)).state == RunState.SUCCEEDED
    with harness.engine.connect() as conn:
        assert item_queries.count_items(conn, run_id) == 4


async def test_the_reconciler_runs_on_a_schedule(harness: Harness) -> None:
    client = harness.env.client
    await ensure_reconcile_schedule(client, harness.task_queue, timedelta(seconds=1))
    await ensure_reconcile_schedule(client, harness.task_queue, timedelta(seconds=1))  # idempotent
    handle = client.get_schedule_handle(RECONCILE_SCHEDULE_ID)
    try:
        for _ in range(100):
            description = await handle.describe()
            if description.info.num_actions >= 1 and description.info.recent_actions:
                break
            await asyncio.sleep(0.2)
        assert description.info.num_actions >= 1, "the schedule never started a pass"
    finally:
        await handle.delete()
