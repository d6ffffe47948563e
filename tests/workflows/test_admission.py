"""Capacity admission against the real Temporal server: the account's run limit is never
exceeded, waiting children are visibly ``queued``, workspaces are served fairly, aborts and
lost workers leak no slot, and a 402 from another user of the account shrinks capacity
instead of starting a storm of retries."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from urllib.parse import parse_qs, urlparse

from sqlalchemy import Engine

from orchestrator.domain.admission import Snapshot
from orchestrator.domain.ids import admission_workflow_id
from orchestrator.domain.lifecycle import ChildState, RunState
from orchestrator.platform.webhook_auth import WEBHOOK_CHILD_PARAM
from orchestrator.service.commands import SubmitRequest
from orchestrator.service.control import abort_request
from orchestrator.workflows.admission import AdmissionWorkflow
from orchestrator.workflows.admission_types import AdmissionInput
from tests.support.waiting import eventually_async
from tests.workflows.conftest import Harness, HarnessFactory
from tests.workflows.fakes import Script
from tests.workflows.support import children, request, result_of, submit, transitions

FOREVER = 10**9


def leads(n: int, workspace: str | None = None) -> SubmitRequest:
    body = request(*({"actor": "ultron-leadgen", "input": {"brief": f"b{i}"}} for i in range(n)))
    return dataclasses.replace(body, workspace_id=workspace or f"ws_{uuid.uuid4().hex[:10]}")


async def snapshot(h: Harness) -> Snapshot:
    handle = h.env.client.get_workflow_handle(admission_workflow_id(h.task_queue))
    return await handle.query(AdmissionWorkflow.snapshot)


def started_children(h: Harness) -> list[str]:
    """Child ids in the order their platform runs were started."""
    return [
        parse_qs(urlparse(url).query)[WEBHOOK_CHILD_PARAM][0] for url in h.platform.webhook_runs
    ]


def states(h: Harness, run_id: str) -> list[ChildState]:
    return [c.state for c in children(h, run_id)]


async def test_the_account_limit_is_never_exceeded_and_the_rest_wait_queued(
    harness: Harness,
) -> None:
    h = harness
    h.platform.max_runs = 2
    h.platform.scripts["ultron~leadgen"] = Script(items=3, polls_to_finish=3)
    run_id = await submit(h, leads(5))
    await eventually_async(
        lambda: states(h, run_id).count(ChildState.QUEUED) == 3, description="3 queued"
    )
    assert (await result_of(h, run_id)).state == RunState.SUCCEEDED
    assert h.platform.peak_active == 2
    assert len(h.platform.starts) == 5 and h.platform.capacity_refusals == 0
    assert sum(1 for t in transitions(h, run_id) if t == "queued") == 3
    snap = await eventually_async(
        lambda: _idle(h), retry_on=(AssertionError,), description="every slot released"
    )
    assert snap.capacity_runs == 2


async def test_a_slot_is_given_back_when_the_platform_run_ends_not_after_its_ingest(
    harness: Harness,
) -> None:
    """An account of one run: the second child starts while the first one's rows are still
    being read (its platform run is over, so is its hold on the account's slot)."""
    h = harness
    h.platform.max_runs = 1
    h.platform.scripts["ultron~leadgen"] = Script(items=3)
    gate = asyncio.Event()
    read_page = h.platform.dataset_page

    async def page_once_both_started(dataset_id: str, offset: int, limit: int) -> list[bytes]:
        await gate.wait()
        return await read_page(dataset_id, offset, limit)

    h.platform.dataset_page = page_once_both_started  # type: ignore[method-assign]
    run_id = await submit(h, leads(2))
    # Without the early release the first ingest would hold the only slot: no second start.
    await eventually_async(lambda: len(h.platform.starts) == 2, description="both started")
    assert states(h, run_id)[0] == ChildState.INGESTING
    gate.set()
    assert (await result_of(h, run_id)).state == RunState.SUCCEEDED
    assert h.platform.peak_active == 1 and h.platform.capacity_refusals == 0
    await eventually_async(lambda: _idle(h), retry_on=(AssertionError,), description="idle")


async def _idle(h: Harness) -> Snapshot:
    snap = await snapshot(h)
    assert snap.used_runs == 0 and snap.waiting == 0, snap
    return snap


async def test_one_child_of_a_second_workspace_starts_within_one_slot_turn(
    harness: Harness,
) -> None:
    h = harness
    h.platform.max_runs = 1
    h.platform.scripts["ultron~leadgen"] = Script(items=1, polls_to_finish=2)
    burst = await submit(h, leads(6, "ws_burst"))
    await eventually_async(
        lambda: states(h, burst).count(ChildState.QUEUED) == 5, description="burst queued"
    )
    single = await submit(h, leads(1, "ws_single"))
    # Once admission holds the single child's ticket, count what the burst was granted so
    # far (6 minus its waiting tickets): at most one more burst child may go before it.
    granted = await eventually_async(
        lambda: _burst_granted_once_single_asked(h, f"{single}.0"),
        description="the single child's ticket arrived",
    )
    assert (await result_of(h, single)).state == RunState.SUCCEEDED
    assert (await result_of(h, burst)).state == RunState.SUCCEEDED
    order = started_children(h)
    # At most one more child of the burst was started before the single one.
    assert order.index(f"{single}.0") <= granted + 1, order
    assert h.platform.peak_active == 1


async def _burst_granted_once_single_asked(h: Harness, child_id: str) -> int | None:
    """Grants to ws_burst so far, read in the same query that shows ws_single's ticket (or
    None before it arrived)."""
    snap = await snapshot(h)
    loads = {w.workspace_id: w for w in snap.workspaces}
    if "ws_single" not in loads and child_id not in started_children(h):
        return None
    burst = loads.get("ws_burst")
    return 6 - (burst.waiting if burst else 0)


async def test_an_abort_while_children_are_queued_frees_every_slot(harness: Harness) -> None:
    h = harness
    h.platform.max_runs = 1
    h.platform.scripts["ultron~leadgen"] = Script(items=1, polls_to_finish=FOREVER)
    run_id = await submit(h, leads(4))
    await eventually_async(
        lambda: states(h, run_id).count(ChildState.QUEUED) == 3, description="3 queued"
    )
    snap = await snapshot(h)
    assert (snap.used_runs, snap.waiting) == (1, 3)
    assert (await abort_request(h.engine, h.env.client, run_id)).accepted
    assert (await result_of(h, run_id)).state == RunState.ABORTED
    assert set(states(h, run_id)) == {ChildState.ABORTED}
    await eventually_async(lambda: _idle(h), description="nothing held or waiting")
    assert len(h.platform.starts) == 1


async def test_a_worker_killed_mid_way_leaks_no_slot(
    make_harness: HarnessFactory, sqlite_engine: Engine
) -> None:
    async with make_harness(sqlite_engine) as first:
        first.platform.max_runs = 2
        first.platform.scripts["ultron~leadgen"] = Script(items=2, polls_to_finish=4)
        run_id = await submit(first, leads(5))
        await eventually_async(
            lambda: states(first, run_id).count(ChildState.RUNNING) == 2, description="2 running"
        )
    # The worker is gone; a new one takes over the task queue (same platform, same database).
    async with make_harness(
        sqlite_engine, task_queue=first.task_queue, platform=first.platform
    ) as second:
        assert (await result_of(second, run_id)).state == RunState.SUCCEEDED
        assert second.platform.peak_active <= 2
        assert len(second.platform.starts) == 5
        await eventually_async(lambda: _idle(second), description="no slot leaked")


async def test_a_402_from_another_user_shrinks_capacity_without_a_storm_and_recovers(
    harness: Harness,
) -> None:
    h = harness
    h.platform.max_runs = 3
    # Another user started 2 runs since our last read of the limits.
    h.platform.others_unseen = 2
    h.platform.scripts["ultron~leadgen"] = Script(items=1, polls_to_finish=FOREVER)
    run_id = await submit(h, leads(3))
    await eventually_async(lambda: h.platform.capacity_refusals == 2, description="two 402s")
    await eventually_async(
        lambda: states(h, run_id).count(ChildState.QUEUED) == 2, description="requeued"
    )
    # The platform now shows the other user's runs: our capacity is what is left.
    h.platform.others_active, h.platform.others_unseen = 2, 0
    await eventually_async(
        lambda: _capacity(h, 1), description="capacity shrunk to the run we hold"
    )
    assert h.platform.capacity_refusals == 2 and len(h.platform.starts) == 1
    # The other user's runs end: the next refresh gives the slots back.
    h.platform.others_active = 0
    await eventually_async(
        lambda: states(h, run_id).count(ChildState.RUNNING) == 3, description="all running"
    )
    assert h.platform.capacity_refusals == 2
    assert (await abort_request(h.engine, h.env.client, run_id)).accepted
    assert (await result_of(h, run_id)).state == RunState.ABORTED
    await eventually_async(lambda: _idle(h), description="nothing held")


async def _capacity(h: Harness, runs: int) -> bool:
    snap = await snapshot(h)
    return snap.capacity_runs == runs and snap.used_runs == 1 and snap.waiting == 2


async def test_admission_continues_as_new_with_its_state(harness: Harness) -> None:
    """Slots held across a continue-as-new stay held (and are released) in the next run."""
    h = harness
    h.platform.max_runs = 2
    h.platform.scripts["ultron~leadgen"] = Script(items=1, polls_to_finish=3)
    first = await h.env.client.start_workflow(
        AdmissionWorkflow.run,
        AdmissionInput(refresh_seconds=1.0, rounds_per_run=2),
        id=admission_workflow_id(h.task_queue),
        task_queue=h.task_queue,
    )
    run_id = await submit(h, leads(4))
    assert (await result_of(h, run_id)).state == RunState.SUCCEEDED
    assert h.platform.peak_active == 2 and len(h.platform.starts) == 4
    latest = await h.env.client.get_workflow_handle(admission_workflow_id(h.task_queue)).describe()
    assert latest.run_id != first.result_run_id
    snap = await eventually_async(lambda: _idle(h), description="every slot released")
    assert snap.capacity_runs == 2
