"""ScraperOrchestrator and PollerWorkflow on a real Temporal dev server, fake platform."""

from __future__ import annotations

import contextlib

from sqlalchemy import select
from temporalio.service import RPCError

from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.schema import scrape_items
from orchestrator.domain.ids import orchestrator_workflow_id, poller_workflow_id
from orchestrator.domain.lifecycle import ChildState, RunState
from orchestrator.service.submission import submit
from orchestrator.workflows.poller import PLATFORM_SIGNAL
from orchestrator.workflows.types import OrchestratorResult, PlatformSignal
from tests.support.db import count_items
from tests.support.waiting import eventually_async
from tests.workflows.conftest import Harness
from tests.workflows.fakes import Script, permanent, retryable
from tests.workflows.support import request, run_to_end, wait_for_workflow


async def test_all_children_succeed_and_every_row_is_stored_once(harness: Harness) -> None:
    harness.platform.scripts["ultron~leadgen"] = Script(items=23, polls_to_finish=2)
    harness.platform.scripts["ultron~similarweb-bulk"] = Script(items=7)
    run_id, result = await run_to_end(
        harness,
        request(
            {"actor": "ultron-leadgen", "input": {"brief": "b"}},
            {"actor": "ultron-similarweb-bulk", "input": {"domains": ["a.com"]}},
        ),
    )
    assert result.state == RunState.SUCCEEDED
    with harness.engine.connect() as conn:
        run = run_queries.get_run(conn, run_id)
        children = run_queries.get_children(conn, run_id)
        assert run is not None and run.state is RunState.SUCCEEDED and run.finished_at
        assert [c.state for c in children] == [ChildState.SUCCEEDED, ChildState.SUCCEEDED]
        assert [c.items_ingested for c in children] == [23, 7]
        assert count_items(conn, run_id) == 30
        rows = conn.execute(
            select(scrape_items.c.workspace_id, scrape_items.c.skill_run_id, scrape_items.c.actor)
            .where(scrape_items.c.run_id == run_id)
            .distinct()
        ).all()
        assert set(rows) == {
            ("ws_test", "skill_1", "ultron-leadgen"),
            ("ws_test", "skill_1", "ultron-similarweb-bulk"),
        }
        kinds = {e.kind for e in event_queries.list_events(conn, run_id)}
    assert {"run.created", "child.spawn_attempt", "child.poll", "child.ingest_page"} <= kinds
    # Each child registered an ad-hoc webhook for the terminal events, with its token.
    assert len(harness.platform.webhooks) == 2
    assert "ACTOR.RUN.TIMED_OUT" in harness.platform.webhooks[0].event_types


async def test_all_children_fail_with_the_platform_message(harness: Harness) -> None:
    harness.platform.scripts["ultron~leadgen"] = Script(
        final_status="FAILED", status_message="The actor crashed"
    )
    run_id, result = await run_to_end(
        harness,
        request({"actor": "ultron-leadgen"}, {"actor": "ultron-leadgen"}),
    )
    assert result.state == RunState.FAILED
    with harness.engine.connect() as conn:
        children = run_queries.get_children(conn, run_id)
    assert all(c.state is ChildState.FAILED for c in children)
    assert all(c.status_message == "The actor crashed" for c in children)
    assert all(c.platform_status == "FAILED" for c in children)


async def test_a_start_refused_for_good_fails_only_that_child(harness: Harness) -> None:
    harness.platform.scripts["ultron~similarweb-bulk"] = Script(
        start_errors=[permanent("Input is not valid: domains is required")]
    )
    harness.platform.scripts["ultron~leadgen"] = Script(
        items=3, start_errors=[retryable("platform hiccup")]
    )
    run_id, result = await run_to_end(
        harness,
        request({"actor": "ultron-leadgen"}, {"actor": "ultron-similarweb-bulk"}),
    )
    assert result.state == RunState.PARTIAL
    with harness.engine.connect() as conn:
        lead, web = run_queries.get_children(conn, run_id)
        kinds = [e.kind for e in event_queries.list_events(conn, run_id)]
    assert lead.state is ChildState.SUCCEEDED and lead.items_ingested == 3
    assert web.state is ChildState.FAILED
    assert web.status_message == "Input is not valid: domains is required"
    assert kinds.count("child.spawn_error") == 2
    # The refused start was not retried; the transient one was, once.
    assert [actor for actor, _ in harness.platform.starts] == ["ultron~leadgen"]


async def test_a_signal_wakes_the_poller_before_the_interval(harness: Harness) -> None:
    harness.platform.scripts["ultron~leadgen"] = Script(items=2, polls_to_finish=2)
    record = (
        await submit(
            harness.engine,
            harness.env.client,
            harness.task_queue,
            request({"actor": "ultron-leadgen"}),
        )
    ).run
    child = f"{record.id}.0"
    poller = harness.env.client.get_workflow_handle(poller_workflow_id(child))
    # Wait for the poller to exist, then signal it twice (a duplicated webhook).
    await wait_for_workflow(harness, poller_workflow_id(child))
    for _ in range(2):
        await poller.signal(PLATFORM_SIGNAL, PlatformSignal(event_type="ACTOR.RUN.SUCCEEDED"))
    handle = harness.env.client.get_workflow_handle(
        orchestrator_workflow_id(record.id), result_type=OrchestratorResult
    )
    result = await handle.result()
    assert result.state == RunState.SUCCEEDED
    with harness.engine.connect() as conn:
        assert count_items(conn, record.id) == 2


async def test_signals_out_of_order_or_lying_change_nothing_but_timing(harness: Harness) -> None:
    harness.platform.scripts["ultron~leadgen"] = Script(items=5, polls_to_finish=3)
    record = (
        await submit(
            harness.engine,
            harness.env.client,
            harness.task_queue,
            request({"actor": "ultron-leadgen"}),
        )
    ).run
    poller = harness.env.client.get_workflow_handle(poller_workflow_id(f"{record.id}.0"))
    # Before the poller exists a signal is refused; the poller's first look covers it.
    for event in ("ACTOR.RUN.FAILED", "ACTOR.RUN.ABORTED", "ACTOR.RUN.SUCCEEDED"):

        async def signalled(event: str = event) -> bool:
            await poller.signal(PLATFORM_SIGNAL, PlatformSignal(event_type=event))
            return True

        await eventually_async(signalled, retry_on=(RPCError,))
    handle = harness.env.client.get_workflow_handle(
        orchestrator_workflow_id(record.id), result_type=OrchestratorResult
    )
    assert (await handle.result()).state == RunState.SUCCEEDED
    with harness.engine.connect() as conn:
        (child,) = run_queries.get_children(conn, record.id)
    assert child.state is ChildState.SUCCEEDED and child.items_ingested == 5
    # A signal to a poller that has finished is refused by Temporal, and harmless.
    with contextlib.suppress(Exception):
        await poller.signal(PLATFORM_SIGNAL, PlatformSignal(event_type="ACTOR.RUN.FAILED"))
    assert (await handle.result()).state == RunState.SUCCEEDED


async def test_pages_are_read_without_a_trailing_empty_call(harness: Harness) -> None:
    # Page size 7 in the harness: 21 items are exactly three pages, 0 items one empty page.
    harness.platform.scripts["ultron~leadgen"] = Script(items=21)
    run_id, result = await run_to_end(harness, request({"actor": "ultron-leadgen"}))
    assert result.state == RunState.SUCCEEDED
    assert harness.platform.page_calls == 3
    with harness.engine.connect() as conn:
        assert count_items(conn, run_id) == 21
    harness.platform.scripts["ultron~leadgen"] = Script(items=0)
    _, empty = await run_to_end(harness, request({"actor": "ultron-leadgen"}))
    assert empty.state == RunState.SUCCEEDED
    assert harness.platform.page_calls == 4
