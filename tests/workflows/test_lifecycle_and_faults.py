"""Every header state, abort, the backstop, platform faults and exactly-once ingestion."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import Engine, select

from orchestrator.db.queries import events as event_queries
from orchestrator.db.schema import scrape_items
from orchestrator.domain.ids import child_id, poller_workflow_id
from orchestrator.domain.lifecycle import ChildState, RunState
from orchestrator.platform.port import ErrorKind, PlatformError
from orchestrator.service.control import abort_request
from tests.support.db import count_items
from tests.support.waiting import eventually_async
from tests.workflows.conftest import Harness, HarnessFactory
from tests.workflows.fakes import Script, hold_starts_until_cancelled
from tests.workflows.support import (
    children,
    event_kinds,
    header,
    request,
    result_of,
    run_to_end,
    submit,
)


def header_states(h: Harness, run_id: str) -> list[str]:
    with h.engine.connect() as conn:
        events = event_queries.list_events(conn, run_id, limit=10_000)
    return [e.data["to"] for e in events if e.kind == "run.state" and e.data]


async def test_partial_while_running_and_as_the_final_mixed_state(harness: Harness) -> None:
    harness.platform.scripts["ultron~leadgen"] = Script(final_status="FAILED", polls_to_finish=1)
    harness.platform.scripts["ultron~similarweb-bulk"] = Script(items=3, polls_to_finish=4)
    run_id = await submit(
        harness, request({"actor": "ultron-leadgen"}, {"actor": "ultron-similarweb-bulk"})
    )
    # One child failed while the other still runs: partial, not terminal.
    await eventually_async(lambda: header(harness, run_id).state is RunState.PARTIAL)
    assert not header(harness, run_id).terminal
    result = await result_of(harness, run_id)
    assert result.state == RunState.PARTIAL
    final = header(harness, run_id)
    assert final.state is RunState.PARTIAL and final.finished_at is not None
    assert [c.state for c in children(harness, run_id)] == [
        ChildState.FAILED,
        ChildState.SUCCEEDED,
    ]
    states = header_states(harness, run_id)
    assert states[:2] == ["spawning", "running"] or states[0] == "spawning"
    assert "partial" in states


async def test_backstop_times_out_a_run_that_never_ends(harness: Harness) -> None:
    harness.platform.scripts["ultron~leadgen"] = Script(polls_to_finish=10**9)
    run_id, result = await run_to_end(
        harness, request({"actor": "ultron-leadgen", "options": {"timeoutSec": 1}})
    )
    assert result.state == RunState.TIMED_OUT
    (child,) = children(harness, run_id)
    assert child.state is ChildState.TIMED_OUT
    assert child.status_message and "no final status" in child.status_message
    # We stop watching it, so it must not keep running (and being billed) on the platform.
    (platform_run,) = harness.platform.runs.values()
    assert platform_run.aborted
    assert child.platform_status == "ABORTED"
    assert event_kinds(harness, run_id)["child.abort"] == 1


async def test_platform_aborted_run_ends_the_child_aborted(harness: Harness) -> None:
    harness.platform.scripts["ultron~leadgen"] = Script(
        final_status="ABORTED", status_message="Actor was aborted"
    )
    harness.platform.scripts["ultron~similarweb-bulk"] = Script(
        final_status="TIMED-OUT", status_message="Actor timed out"
    )
    run_id, result = await run_to_end(
        harness, request({"actor": "ultron-leadgen"}, {"actor": "ultron-similarweb-bulk"})
    )
    aborted, timed_out = children(harness, run_id)
    assert aborted.state is ChildState.ABORTED and aborted.status_message == "Actor was aborted"
    assert timed_out.state is ChildState.FAILED and timed_out.platform_status == "TIMED-OUT"
    assert timed_out.status_message == "Actor timed out"
    assert result.state == RunState.FAILED


async def test_abort_aborts_every_unfinished_child_on_the_platform(harness: Harness) -> None:
    harness.platform.scripts["ultron~leadgen"] = Script(polls_to_finish=10**9)
    harness.platform.scripts["ultron~similarweb-bulk"] = Script(items=2)
    run_id = await submit(
        harness,
        request(
            {"actor": "ultron-leadgen"},
            {"actor": "ultron-leadgen"},
            {"actor": "ultron-similarweb-bulk"},
        ),
    )
    await eventually_async(
        lambda: (
            [c.state for c in children(harness, run_id)]
            == [ChildState.RUNNING, ChildState.RUNNING, ChildState.SUCCEEDED]
        )
    )
    outcome = await abort_request(harness.engine, harness.env.client, run_id)
    assert outcome.accepted
    result = await result_of(harness, run_id)
    assert result.state == RunState.ABORTED
    run = header(harness, run_id)
    assert run.state is RunState.ABORTED and run.terminal and run.finished_at
    first, second, done = children(harness, run_id)
    assert first.state is ChildState.ABORTED and second.state is ChildState.ABORTED
    assert first.platform_status == "ABORTED"
    assert done.state is ChildState.SUCCEEDED  # finished work is kept
    assert all(r.aborted for r in harness.platform.runs.values() if r.actor_id == "ultron~leadgen")
    # Aborting again, now that it has ended, is a no-op that says so.
    again = await abort_request(harness.engine, harness.env.client, run_id)
    assert not again.accepted and again.run.state is RunState.ABORTED


async def test_capacity_errors_wait_and_retry_instead_of_failing(harness: Harness) -> None:
    harness.platform.scripts["ultron~leadgen"] = Script(
        items=4,
        start_errors=[
            PlatformError(
                ErrorKind.CAPACITY,
                "By launching this job you will exceed the memory limit",
                status_code=402,
                error_type="actor-memory-limit-exceeded",
            ),
            PlatformError(
                ErrorKind.CAPACITY,
                "concurrent runs limit",
                status_code=402,
                error_type="concurrent-runs-limit-exceeded",
            ),
        ],
    )
    run_id, result = await run_to_end(harness, request({"actor": "ultron-leadgen"}))
    assert result.state == RunState.SUCCEEDED
    assert event_kinds(harness, run_id)["child.spawn_error"] == 2
    assert len(harness.platform.starts) == 1


async def test_an_abort_during_a_capacity_wait_ends_that_child_aborted_not_failed(
    make_harness: HarnessFactory, sqlite_engine: Engine
) -> None:
    refused = PlatformError(
        ErrorKind.CAPACITY,
        "concurrent runs limit",
        status_code=402,
        error_type="concurrent-runs-limit-exceeded",
    )
    # A long capacity wait, so the abort lands while the start waits for its next attempt.
    async with make_harness(sqlite_engine, capacity_retry_seconds=60.0) as h:
        h.platform.scripts["ultron~leadgen"] = Script(start_errors=[refused] * 100)
        h.platform.scripts["ultron~similarweb-bulk"] = Script(polls_to_finish=10**9)
        run_id = await submit(
            h, request({"actor": "ultron-leadgen"}, {"actor": "ultron-similarweb-bulk"})
        )
        await eventually_async(
            lambda: (
                event_kinds(h, run_id)["child.spawn_error"] >= 1
                and children(h, run_id)[1].state is ChildState.RUNNING
            )
        )
        assert (await abort_request(h.engine, h.env.client, run_id)).accepted
        assert (await result_of(h, run_id)).state == RunState.ABORTED
        waiting, running = children(h, run_id)
        assert waiting.state is ChildState.ABORTED, waiting.status_message
        assert running.state is ChildState.ABORTED
        assert not {"partial", "failed"} & set(header_states(h, run_id))
        assert [actor for actor, _ in h.platform.starts] == ["ultron~similarweb-bulk"]


async def test_an_abort_reaching_a_start_in_flight_still_aborts_the_run_it_started(
    harness: Harness,
) -> None:
    """The start heartbeats, so an abort reaches it mid-call; the run the platform may
    already have started must be recorded and aborted, not left running unseen."""
    entered = hold_starts_until_cancelled(harness.platform)
    harness.platform.scripts["ultron~leadgen"] = Script(polls_to_finish=10**9)
    run_id = await submit(harness, request({"actor": "ultron-leadgen"}))
    await asyncio.wait_for(entered.wait(), timeout=30)
    assert (await abort_request(harness.engine, harness.env.client, run_id)).accepted
    assert (await result_of(harness, run_id)).state == RunState.ABORTED
    (child,) = children(harness, run_id)
    assert child.state is ChildState.ABORTED and child.platform_run_id is not None
    (platform_run,) = harness.platform.runs.values()
    assert platform_run.aborted and child.platform_status == "ABORTED"


async def test_a_start_whose_answer_was_lost_is_found_not_repeated(harness: Harness) -> None:
    harness.platform.scripts["ultron~leadgen"] = Script(items=5, lost_answers=1)
    run_id, result = await run_to_end(harness, request({"actor": "ultron-leadgen"}))
    assert result.state == RunState.SUCCEEDED
    assert len(harness.platform.runs) == 1, "a second platform run was started"
    assert harness.platform.lookups >= 1
    assert event_kinds(harness, run_id)["child.spawn_recovered"] == 1
    (child,) = children(harness, run_id)
    assert child.platform_run_id == "run0" and child.items_ingested == 5


@pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_ingest_failing_after_a_committed_page_resumes_without_duplicates(
    make_harness: HarnessFactory, request_engine: Engine, database: str
) -> None:
    async with make_harness(request_engine) as h:
        h.platform.scripts["ultron~generator"] = Script(items=45, failing_page_offsets={14, 35})
        run_id, result = await run_to_end(h, request({"actor": "ultron-generator"}))
        assert result.state == RunState.SUCCEEDED
        with h.engine.connect() as conn:
            indexes = (
                conn.execute(
                    select(scrape_items.c.item_index).where(scrape_items.c.run_id == run_id)
                )
                .scalars()
                .all()
            )
            assert count_items(conn, run_id) == 45
        assert sorted(indexes) == list(range(45))
        kinds = event_kinds(h, run_id)
        assert kinds["child.ingest_resume"] == 2
        (child,) = children(h, run_id)
        assert child.items_ingested == 45 and child.state is ChildState.SUCCEEDED


async def test_long_polls_continue_as_new_and_keep_their_deadline(
    make_harness: HarnessFactory, sqlite_engine: Engine
) -> None:
    async with make_harness(sqlite_engine, polls_per_workflow_run=2) as h:
        h.platform.scripts["ultron~leadgen"] = Script(items=3, polls_to_finish=5)
        run_id, result = await run_to_end(h, request({"actor": "ultron-leadgen"}))
        assert result.state == RunState.SUCCEEDED
        runs = [
            w
            async for w in h.env.client.list_workflows(
                f"WorkflowId = '{poller_workflow_id(child_id(run_id, 0))}'"
            )
        ]
        assert len(runs) >= 2, "the poller never continued as new"
        assert event_kinds(h, run_id)["child.poll"] == 5
