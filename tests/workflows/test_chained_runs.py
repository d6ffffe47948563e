"""Chained runs (issue 12, point 3): the master runs a request's runs as a DAG. A run whose
input comes from an earlier run's rows starts once that run has ended and its rows are
stored; its input is built from the database; an empty input skips it. Aborts, budget stops
and a restarted master keep their guarantees mid-chain."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine

from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries import registry
from orchestrator.domain.ids import orchestrator_workflow_id
from orchestrator.domain.lifecycle import ChildState, RunState
from orchestrator.domain.spending import BUDGET_EXHAUSTED
from orchestrator.service.control import abort_request
from orchestrator.service.reconcile import Reconciler
from tests.support.waiting import eventually_async
from tests.workflows.conftest import Harness, HarnessFactory
from tests.workflows.fakes import Script
from tests.workflows.support import (
    assert_kept,
    children,
    event_kinds,
    header,
    request,
    result_of,
    run_to_end,
    submit,
)

LEADS: dict[str, Any] = {"actor": "ultron-leadgen", "input": {"brief": {"product": "x"}}}
OTHER: dict[str, Any] = {"actor": "ultron-generator", "input": {"n": 1}}
FOREVER = 10**9
DOMAINS = ["a.com", "b.com", "a.com", None, "c.com", "b.com"]


def chained(*, run: int = 0, **static: Any) -> dict[str, Any]:
    return {
        "actor": "ultron-similarweb-bulk",
        "input": static,
        "inputFrom": {"domains": {"run": run, "field": "domain"}},
    }


def lead_rows(domains: list[str | None]) -> list[dict[str, Any]]:
    return [{"name": f"lead {i}", "domain": d} for i, d in enumerate(domains)]


def starts_of(h: Harness, actor_id: str) -> list[dict[str, Any]]:
    return [run_input for actor, run_input in h.platform.starts if actor == actor_id]


def event_ids(h: Harness, run_id: str) -> list[tuple[int, str, str | None, Any]]:
    with h.engine.connect() as conn:
        events = event_queries.list_events(conn, run_id, limit=10_000)
    return [(e.id, e.kind, e.child_id, e.data) for e in events]


async def test_independent_runs_start_together_and_the_chained_one_after_its_source(
    harness: Harness,
) -> None:
    h = harness
    h.platform.scripts["ultron~leadgen"] = Script(rows=lead_rows(DOMAINS), polls_to_finish=3)
    h.platform.scripts["ultron~generator"] = Script(items=4, polls_to_finish=1)
    h.platform.scripts["ultron~similarweb-bulk"] = Script(items=3)
    run_id, result = await run_to_end(h, request(LEADS, OTHER, chained(window="3m")))
    assert result.state == RunState.SUCCEEDED
    # Both independent runs were started before the chained one, which got the distinct
    # domains in first-occurrence order, with its static input kept.
    # (the two independent starts run in parallel: in either order)
    first_two = sorted(actor for actor, _ in h.platform.starts[:2])
    assert first_two == ["ultron~generator", "ultron~leadgen"]
    assert starts_of(h, "ultron~similarweb-bulk") == [
        {"window": "3m", "domains": ["a.com", "b.com", "c.com"]}
    ]
    leads, other, traffic = children(h, run_id)
    assert [c.state for c in (leads, other, traffic)] == [ChildState.SUCCEEDED] * 3
    assert traffic.input_built == {"domains": 3} and traffic.input_built_at is not None
    assert traffic.input == {"window": "3m", "domains": ["a.com", "b.com", "c.com"]}
    # Its source was ingested and ended before its input was built and it was started.
    events = event_ids(h, run_id)
    source_done = next(
        i
        for i, kind, cid, data in events
        if cid == leads.id and kind == "child.state" and data and data["to"] == "succeeded"
    )
    built = next(
        i for i, kind, cid, _ in events if cid == traffic.id and kind == "child.input_built"
    )
    spawned = next(
        i for i, kind, cid, _ in events if cid == traffic.id and kind == "child.spawn_attempt"
    )
    assert source_done < built < spawned
    assert event_kinds(h, run_id)["child.input_built"] == 1


async def test_a_chain_of_three_feeds_each_run_from_the_one_before(harness: Harness) -> None:
    h = harness
    h.platform.scripts["ultron~leadgen"] = Script(rows=lead_rows(["x.com", "y.com"]))
    h.platform.scripts["ultron~similarweb-bulk"] = Script(
        rows=[{"domain": "x.com", "visits": 5}, {"domain": "y.com", "visits": 7}]
    )
    third = {
        "actor": "ultron-generator",
        "inputFrom": {"visits": {"run": 1, "field": "visits"}, "d": {"run": 0, "field": "domain"}},
    }
    run_id, result = await run_to_end(h, request(LEADS, chained(), third))
    assert result.state == RunState.SUCCEEDED
    assert starts_of(h, "ultron~generator") == [{"visits": [5, 7], "d": ["x.com", "y.com"]}]
    assert children(h, run_id)[2].input_built == {"visits": 2, "d": 2}


async def test_a_source_without_values_skips_the_chained_run(harness: Harness) -> None:
    h = harness
    h.platform.scripts["ultron~leadgen"] = Script(rows=lead_rows([None, None]))
    run_id, result = await run_to_end(h, request(LEADS, chained()))
    # Skipped is not a failure: the request succeeded with what there was.
    assert result.state == RunState.SUCCEEDED
    leads, traffic = children(h, run_id)
    assert leads.state is ChildState.SUCCEEDED and leads.items_ingested == 2
    assert traffic.state is ChildState.SKIPPED
    assert traffic.status_message == (
        "skipped: run 0 (ultron-leadgen) produced no `domain` values for its input field `domains`"
    )
    assert traffic.input_built is None and traffic.platform_run_id is None
    assert starts_of(h, "ultron~similarweb-bulk") == []
    kinds = event_kinds(h, run_id)
    assert kinds["child.skipped"] == 1 and kinds["child.input_built"] == 0
    assert header(h, run_id).terminal


async def test_a_failed_source_without_rows_skips_and_one_with_rows_still_feeds(
    harness: Harness,
) -> None:
    h = harness
    h.platform.scripts["ultron~leadgen"] = Script(rows=[], final_status="FAILED")
    run_id, result = await run_to_end(h, request(LEADS, chained()))
    assert result.state == RunState.FAILED  # the source's failure, not the skip, decides
    leads, traffic = children(h, run_id)
    assert leads.state is ChildState.FAILED
    assert traffic.state is ChildState.SKIPPED
    assert traffic.status_message and "(it ended failed with 0 row(s))" in traffic.status_message
    # Partial rows of a failed source are real rows: they feed the chained run.
    h.platform.scripts["ultron~leadgen"] = Script(rows=lead_rows(["p.com"]), final_status="FAILED")
    run_id, result = await run_to_end(h, request(LEADS, chained()))
    assert result.state == RunState.PARTIAL
    leads, traffic = children(h, run_id)
    assert_kept(h, leads, 1)
    assert traffic.state is ChildState.SUCCEEDED
    assert starts_of(h, "ultron~similarweb-bulk") == [{"domains": ["p.com"]}]


async def test_a_built_input_above_the_input_limit_fails_the_run_unstarted(
    make_harness: HarnessFactory, sqlite_engine: Engine
) -> None:
    async with make_harness(sqlite_engine, max_input_bytes=20) as h:
        h.platform.scripts["ultron~leadgen"] = Script(rows=lead_rows(["a.com", "b.com"]))
        run_id, result = await run_to_end(h, request(LEADS, chained()))
        assert result.state == RunState.PARTIAL
        traffic = children(h, run_id)[1]
        assert traffic.state is ChildState.FAILED and traffic.platform_run_id is None
        # {"domains":["a.com","b.com"]} is 29 bytes.
        assert traffic.status_message == (
            "the input built from earlier runs is 29 bytes; at most 20 bytes (lower inputFrom max)"
        )
        assert starts_of(h, "ultron~similarweb-bulk") == []


async def test_a_chained_run_requiring_its_field_is_accepted_and_its_built_input_checked(
    harness: Harness,
) -> None:
    """The schema's ``required`` counts a chained field as present at submission; once
    built, the input is checked against the schema, and a bad one fails unstarted."""
    h = harness
    schema = {
        "type": "object",
        "required": ["domains"],
        "properties": {"domains": {"type": "array", "items": {"type": "string", "pattern": "[.]"}}},
    }
    with h.engine.begin() as conn:
        entry = registry.get_actor(conn, "ultron-similarweb-bulk")
        assert entry is not None
        registry.save_actor(
            conn, "ultron-similarweb-bulk", entry.model_copy(update={"input_schema": schema})
        )
    h.platform.scripts["ultron~leadgen"] = Script(rows=lead_rows(["a.com", "nodot"]))
    run_id, result = await run_to_end(h, request(LEADS, chained()))
    assert result.state == RunState.PARTIAL
    traffic = children(h, run_id)[1]
    assert traffic.state is ChildState.FAILED and traffic.platform_run_id is None
    assert traffic.status_message is not None
    assert traffic.status_message.startswith(
        "the input built from earlier runs is not valid: /domains/1: 'nodot' does not match"
    )
    assert starts_of(h, "ultron~similarweb-bulk") == []


async def test_an_abort_mid_chain_never_starts_the_chained_run(harness: Harness) -> None:
    h = harness
    h.platform.scripts["ultron~leadgen"] = Script(
        rows=lead_rows(["a.com"]), polls_to_finish=FOREVER
    )
    run_id = await submit(h, request(LEADS, chained()))
    await eventually_async(lambda: children(h, run_id)[0].state is ChildState.RUNNING)
    assert header(h, run_id).state is RunState.RUNNING  # a waiting run is not "spawning"
    await abort_request(h.engine, h.env.client, run_id)
    assert (await result_of(h, run_id)).state == RunState.ABORTED
    leads, traffic = children(h, run_id)
    assert leads.state is ChildState.ABORTED
    assert_kept(h, leads, 1)
    assert traffic.state is ChildState.ABORTED and traffic.platform_run_id is None
    assert traffic.input_built_at is None
    assert starts_of(h, "ultron~similarweb-bulk") == []


async def test_a_restarted_master_starts_the_chained_run_once(harness: Harness) -> None:
    h = harness
    h.platform.scripts["ultron~leadgen"] = Script(
        rows=lead_rows(["a.com", "b.com"]), polls_to_finish=6
    )
    run_id = await submit(h, request(LEADS, chained()))
    await eventually_async(lambda: children(h, run_id)[0].state is ChildState.RUNNING)
    await h.env.client.get_workflow_handle(orchestrator_workflow_id(run_id)).terminate(
        "drift on purpose"
    )
    reconciler = Reconciler(
        h.engine, h.env.client, h.task_queue, h.config.follow, grace=timedelta(0)
    )
    assert (await reconciler.reconcile()).masters_restarted == 1
    assert (await result_of(h, run_id)).state == RunState.SUCCEEDED
    assert starts_of(h, "ultron~similarweb-bulk") == [{"domains": ["a.com", "b.com"]}]
    assert len(h.platform.runs) == 2, "a platform run was started twice"
    assert event_kinds(h, run_id)["child.input_built"] == 1
    # Nothing left to repair, and a reconciler pass now changes nothing.
    assert (await reconciler.reconcile()).masters_restarted == 0


async def test_a_master_restarted_after_the_input_was_built_does_not_build_it_again(
    harness: Harness,
) -> None:
    """The restart comes while the chained run itself runs: it is followed, not started."""
    h = harness
    h.platform.scripts["ultron~leadgen"] = Script(rows=lead_rows(["a.com"]))
    h.platform.scripts["ultron~similarweb-bulk"] = Script(items=2, polls_to_finish=6)
    run_id = await submit(h, request(LEADS, chained()))
    await eventually_async(lambda: children(h, run_id)[1].state is ChildState.RUNNING)
    await h.env.client.get_workflow_handle(orchestrator_workflow_id(run_id)).terminate(
        "drift on purpose"
    )
    reconciler = Reconciler(
        h.engine, h.env.client, h.task_queue, h.config.follow, grace=timedelta(0)
    )
    assert (await reconciler.reconcile()).masters_restarted == 1
    assert (await result_of(h, run_id)).state == RunState.SUCCEEDED
    assert len(starts_of(h, "ultron~similarweb-bulk")) == 1
    assert event_kinds(h, run_id)["child.input_built"] == 1


async def test_a_budget_stop_mid_chain_never_starts_the_chained_run(
    make_harness: HarnessFactory, own_engine: Engine
) -> None:
    async with make_harness(own_engine) as h:
        h.platform.scripts["ultron~leadgen"] = Script(
            rows=lead_rows(["a.com", "b.com"]),
            polls_to_finish=FOREVER,
            usage=[0.3, 0.6, 0.9, 1.2],
        )
        body = dataclasses.replace(
            request(LEADS, chained()),
            budget_usd=1.0,
            workspace_id=f"ws_chain_{uuid.uuid4().hex[:12]}",
        )
        run_id, result = await run_to_end(h, body)
        assert result.state == RunState.ABORTED
        assert header(h, run_id).stop_reason == BUDGET_EXHAUSTED
        leads, traffic = children(h, run_id)
        assert_kept(h, leads, 2)
        assert traffic.state is ChildState.ABORTED and traffic.platform_run_id is None
        assert traffic.status_message and traffic.status_message.startswith("stopped: the")
        assert starts_of(h, "ultron~similarweb-bulk") == []
