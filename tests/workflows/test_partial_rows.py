"""Rows of children that did not succeed are kept (issue 11, point 6): a failed, timed-out
or aborted run has its dataset ingested once before the child ends, in its real state."""

from __future__ import annotations

import asyncio
import dataclasses

from sqlalchemy import Engine

from orchestrator.domain.lifecycle import ChildState, RunState
from orchestrator.service.control import abort_request
from tests.support.waiting import eventually_async
from tests.workflows.conftest import Harness, HarnessFactory
from tests.workflows.fakes import Script, hold_starts_until_cancelled, permanent
from tests.workflows.support import (
    assert_kept,
    children,
    event_kinds,
    request,
    result_of,
    run_to_end,
    submit,
    transitions,
)


async def test_a_failed_run_keeps_its_rows_and_stays_failed(
    make_harness: HarnessFactory, own_engine: Engine
) -> None:
    async with make_harness(own_engine) as h:
        h.platform.scripts["ultron~leadgen"] = Script(
            items=12, final_status="FAILED", status_message="The actor crashed"
        )
        h.platform.scripts["ultron~similarweb-bulk"] = Script(
            items=4, final_status="ABORTED", status_message="Charge limit reached"
        )
        run_id, result = await run_to_end(
            h, request({"actor": "ultron-leadgen"}, {"actor": "ultron-similarweb-bulk"})
        )
        assert result.state == RunState.FAILED
        failed, aborted = children(h, run_id)
        assert failed.state is ChildState.FAILED
        assert failed.status_message == "The actor crashed"
        assert_kept(h, failed, 12)
        assert aborted.state is ChildState.ABORTED
        assert aborted.status_message == "Charge limit reached"
        assert_kept(h, aborted, 4)
        # Ingested while not final, then final.
        assert transitions(h, run_id).count("ingesting") == 2


async def test_keep_partial_rows_false_ends_them_at_once(harness: Harness) -> None:
    harness.platform.scripts["ultron~leadgen"] = Script(items=12, final_status="FAILED")
    body = dataclasses.replace(request({"actor": "ultron-leadgen"}), keep_partial_rows=False)
    run_id, result = await run_to_end(harness, body)
    assert result.state == RunState.FAILED
    (child,) = children(harness, run_id)
    assert child.state is ChildState.FAILED and child.items_ingested == 0 and not child.partial
    assert harness.platform.page_calls == 0
    assert "ingesting" not in transitions(harness, run_id)


async def test_the_backstop_keeps_the_rows_of_the_run_it_aborts(harness: Harness) -> None:
    harness.platform.scripts["ultron~leadgen"] = Script(items=9, polls_to_finish=10**9)
    run_id, result = await run_to_end(
        harness, request({"actor": "ultron-leadgen", "options": {"timeoutSec": 1}})
    )
    assert result.state == RunState.TIMED_OUT
    (child,) = children(harness, run_id)
    assert child.state is ChildState.TIMED_OUT
    assert child.status_message and "no final status" in child.status_message
    assert_kept(harness, child, 9)
    (platform_run,) = harness.platform.runs.values()
    assert platform_run.aborted
    assert event_kinds(harness, run_id)["child.abort"] == 1


async def test_a_caller_abort_keeps_the_rows_of_every_aborted_run_once(
    make_harness: HarnessFactory, own_engine: Engine
) -> None:
    async with make_harness(own_engine) as h:
        h.platform.scripts["ultron~leadgen"] = Script(items=15, polls_to_finish=10**9)
        run_id = await submit(h, request({"actor": "ultron-leadgen"}, {"actor": "ultron-leadgen"}))
        await eventually_async(
            lambda: all(c.state is ChildState.RUNNING for c in children(h, run_id))
        )
        assert (await abort_request(h.engine, h.env.client, run_id)).accepted
        assert (await result_of(h, run_id)).state == RunState.ABORTED
        for child in children(h, run_id):
            assert child.state is ChildState.ABORTED
            assert_kept(h, child, 15)
        assert all(r.aborted for r in h.platform.runs.values())
        assert transitions(h, run_id).count("aborted") == 2


async def test_an_abort_before_the_poller_keeps_the_rows_in_the_sweep(harness: Harness) -> None:
    """The abort reaches the start in flight, so the child never gets a poller: the master's
    sweep ingests its rows."""
    entered = hold_starts_until_cancelled(harness.platform)
    harness.platform.scripts["ultron~leadgen"] = Script(items=8, polls_to_finish=10**9)
    run_id = await submit(harness, request({"actor": "ultron-leadgen"}))
    await asyncio.wait_for(entered.wait(), timeout=30)
    assert (await abort_request(harness.engine, harness.env.client, run_id)).accepted
    assert (await result_of(harness, run_id)).state == RunState.ABORTED
    (child,) = children(harness, run_id)
    assert child.state is ChildState.ABORTED
    assert_kept(harness, child, 8)


async def test_a_failing_partial_ingest_still_ends_the_child_in_its_real_state(
    harness: Harness,
) -> None:
    harness.platform.scripts["ultron~leadgen"] = Script(
        items=20, final_status="FAILED", status_message="The actor crashed"
    )
    read_page = harness.platform.dataset_page

    async def second_page_gone(dataset_id: str, offset: int, limit: int) -> list[bytes]:
        if offset > 0:
            raise permanent("dataset was deleted")
        return await read_page(dataset_id, offset, limit)

    harness.platform.dataset_page = second_page_gone  # type: ignore[method-assign]
    run_id, result = await run_to_end(harness, request({"actor": "ultron-leadgen"}))
    assert result.state == RunState.FAILED
    (child,) = children(harness, run_id)
    assert child.state is ChildState.FAILED
    assert child.status_message is not None
    assert child.status_message.startswith("The actor crashed; ingesting its partial rows failed")
    page = harness.config.dataset_page_size
    assert_kept(harness, child, page)
    assert event_kinds(harness, run_id)["child.ingest_error"] == 1
