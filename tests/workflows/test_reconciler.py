"""Drift repair: drift is created on purpose, then one reconciler pass repairs it."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Engine

from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.domain.ids import child_id, orchestrator_workflow_id, poller_workflow_id
from orchestrator.domain.lifecycle import ChildState, RunState
from orchestrator.service.reconcile import Reconciler
from orchestrator.worker import ensure_reconcile_schedule
from orchestrator.workflows.reconciler import RECONCILE_SCHEDULE_ID
from orchestrator.workflows.types import PollerInput
from tests.support.db import count_items
from tests.support.waiting import eventually_async
from tests.workflows.conftest import Harness, HarnessFactory
from tests.workflows.fakes import Script
from tests.workflows.support import request, result_of, submit, wait_for_workflow


def child_states(h: Harness, run_id: str) -> list[ChildState]:
    with h.engine.connect() as conn:
        return [c.state for c in run_queries.get_children(conn, run_id)]


async def repair(h: Harness) -> tuple[int, int]:
    reconciler = Reconciler(
        h.engine, h.env.client, h.task_queue, h.config.follow, grace=timedelta(0)
    )
    result = await reconciler.reconcile()
    return result.masters_restarted, result.pollers_restarted


async def poller_started_with(h: Harness, workflow_id: str) -> PollerInput:
    """The input the latest run of a poller was started with (from its history)."""
    history = await h.env.client.get_workflow_handle(workflow_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    (params,) = await h.env.client.data_converter.decode(started.input.payloads, [PollerInput])
    assert isinstance(params, PollerInput)
    return params


async def test_a_master_that_ended_while_the_database_says_running_is_restarted(
    harness: Harness,
) -> None:
    harness.platform.scripts["ultron~leadgen"] = Script(items=9, polls_to_finish=6)
    run_id = await submit(
        harness, request({"actor": "ultron-leadgen"}, {"actor": "ultron-leadgen"})
    )
    await eventually_async(lambda: child_states(harness, run_id) == [ChildState.RUNNING] * 2)
    await harness.env.client.get_workflow_handle(orchestrator_workflow_id(run_id)).terminate(
        "drift on purpose"
    )
    assert await repair(harness) == (1, 0)
    assert (await result_of(harness, run_id)).state == RunState.SUCCEEDED
    with harness.engine.connect() as conn:
        run = run_queries.get_run(conn, run_id)
        assert run is not None and run.state is RunState.SUCCEEDED and run.terminal
        assert count_items(conn, run_id) == 18
        kinds = [e.kind for e in event_queries.list_events(conn, run_id, limit=1000)]
    assert kinds.count("reconcile.master_restarted") == 1
    assert len(harness.platform.runs) == 2, "restarting the master started platform runs again"
    # Nothing left to repair.
    assert await repair(harness) == (0, 0)


async def test_a_child_without_a_poller_gets_one(harness: Harness) -> None:
    harness.platform.scripts["ultron~leadgen"] = Script(items=4, polls_to_finish=5)
    run_id = await submit(harness, request({"actor": "ultron-leadgen"}))
    await eventually_async(lambda: child_states(harness, run_id) == [ChildState.RUNNING])
    poller_id = poller_workflow_id(child_id(run_id, 0))
    await wait_for_workflow(harness, poller_id)
    await harness.env.client.get_workflow_handle(poller_id).terminate("drift on purpose")
    assert await repair(harness) == (0, 1)
    assert (await result_of(harness, run_id)).state == RunState.SUCCEEDED
    with harness.engine.connect() as conn:
        assert count_items(conn, run_id) == 4


async def test_a_restarted_poller_follows_the_same_plan_as_the_first(
    make_harness: HarnessFactory, sqlite_engine: Engine
) -> None:
    """Issue 10 #2: the reconciler used the default 4-hour cap and heartbeat instead of the
    child's timeoutSec + grace and the configured ingest heartbeat."""
    async with make_harness(
        sqlite_engine, default_timeout_grace_seconds=5.0, ingest_heartbeat_seconds=7.0
    ) as h:
        h.platform.scripts["ultron~leadgen"] = Script(items=3, polls_to_finish=6)
        run_id = await submit(
            h, request({"actor": "ultron-leadgen", "options": {"timeoutSec": 120}})
        )
        poller_id = poller_workflow_id(child_id(run_id, 0))
        await eventually_async(lambda: child_states(h, run_id) == [ChildState.RUNNING])
        await wait_for_workflow(h, poller_id)
        first = await poller_started_with(h, poller_id)
        await h.env.client.get_workflow_handle(poller_id).terminate("drift on purpose")
        assert await repair(h) == (0, 1)
        restarted = await poller_started_with(h, poller_id)
        assert restarted.cap_seconds == 125.0
        assert restarted.ingest_heartbeat_seconds == 7.0
        assert restarted == first
        assert (await result_of(h, run_id)).state == RunState.SUCCEEDED


async def test_the_reconciler_runs_on_a_schedule(harness: Harness) -> None:
    client = harness.env.client
    await ensure_reconcile_schedule(client, harness.task_queue, timedelta(seconds=1))
    await ensure_reconcile_schedule(client, harness.task_queue, timedelta(seconds=1))  # idempotent
    handle = client.get_schedule_handle(RECONCILE_SCHEDULE_ID)

    async def started_a_pass() -> bool:
        info = (await handle.describe()).info
        return info.num_actions >= 1 and bool(info.recent_actions)

    try:
        await eventually_async(started_a_pass, timeout=20, description="a reconcile pass")
    finally:
        await handle.delete()
