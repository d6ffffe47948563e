"""Budgets that stop running requests (issue 11, points 4, 5 and 7): the spend is tracked
from the polls; once the request's budget or its workspace's limit is spent, every live
child is stopped by the abort cascade, rows kept, and the request ends in its real state
with the reason ``budget-exhausted``."""

from __future__ import annotations

import dataclasses
import math
import uuid
from typing import Any

import pytest
from sqlalchemy import Engine

from orchestrator.db.queries import budgets as budget_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.domain.lifecycle import ChildState, RunState
from orchestrator.domain.spending import BUDGET_EXHAUSTED, BudgetPeriod, WorkspaceBudgetExhausted
from orchestrator.security.callback_secrets import new_nonce
from orchestrator.service.commands import SubmitRequest
from tests.support.db import count_runs
from tests.support.waiting import eventually_async
from tests.workflows.conftest import Harness, HarnessFactory
from tests.workflows.fakes import Script, retryable
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

LEADS: dict[str, Any] = {"actor": "ultron-leadgen", "input": {"brief": "budget"}}
TRAFFIC: dict[str, Any] = {"actor": "ultron-similarweb-bulk", "input": {"domains": ["a.com"]}}
FOREVER = 10**9


def budgeted(budget_usd: float, *runs: dict[str, Any]) -> SubmitRequest:
    return dataclasses.replace(request(*runs), budget_usd=budget_usd)


def in_workspace(body: SubmitRequest) -> SubmitRequest:
    """Each test its own workspace: limits and spend would leak between tests otherwise."""
    return dataclasses.replace(body, workspace_id=f"ws_budget_{uuid.uuid4().hex[:12]}")


def assert_spend_is_the_childrens(h: Harness, run_id: str) -> None:
    with h.engine.connect() as conn:
        total = run_queries.run_usage_total(conn, run_id)
    figures = [c.usage_total_usd or 0.0 for c in children(h, run_id)]
    assert total == pytest.approx(math.fsum(figures))


async def test_a_spent_budget_stops_every_live_run_and_keeps_their_rows(
    make_harness: HarnessFactory, own_engine: Engine
) -> None:
    async with make_harness(own_engine) as h:
        # Pay per result: the platform does not stop it at its charge limit, we must.
        h.platform.scripts["ultron~similarweb-bulk"] = Script(
            items=9, polls_to_finish=FOREVER, usage=[0.2, 0.4, 0.6, 0.8, 1.0, 1.2]
        )
        h.platform.scripts["ultron~leadgen"] = Script(
            items=5, polls_to_finish=FOREVER, usage=[0.01]
        )
        run_id, result = await run_to_end(h, in_workspace(budgeted(1.0, TRAFFIC, LEADS)))
        assert result.state == RunState.ABORTED  # every child was stopped
        run = header(h, run_id)
        assert run.stop_reason == BUDGET_EXHAUSTED
        assert run.stop_message and "request's budget of $1.000000 is spent" in run.stop_message
        assert not run.aborted, "a budget stop is not the caller's abort"
        traffic, leads = children(h, run_id)
        for child, items in ((traffic, 9), (leads, 5)):
            assert child.state is ChildState.ABORTED
            assert child.status_message and child.status_message.startswith("stopped: the")
            assert_kept(h, child, items)
        assert all(r.aborted for r in h.platform.runs.values())
        kinds = event_kinds(h, run_id)
        assert kinds["run.budget_exhausted"] == 1
        # The poller and the master's sweep may both send the (idempotent) abort.
        assert kinds["child.abort"] >= 2
        assert_spend_is_the_childrens(h, run_id)
        with h.engine.connect() as conn:
            assert run_queries.run_usage_total(conn, run_id) >= 1.0


async def test_the_request_ends_in_its_real_state_when_some_runs_had_finished(
    harness: Harness,
) -> None:
    harness.platform.scripts["ultron~leadgen"] = Script(items=3, usage=[0.3])
    harness.platform.scripts["ultron~similarweb-bulk"] = Script(
        items=4, polls_to_finish=FOREVER, usage=[0.1, 0.5, 0.9]
    )
    run_id, result = await run_to_end(harness, in_workspace(budgeted(1.0, LEADS, TRAFFIC)))
    assert result.state == RunState.PARTIAL
    leads, traffic = children(harness, run_id)
    assert leads.state is ChildState.SUCCEEDED and leads.items_ingested == 3
    assert traffic.state is ChildState.ABORTED
    assert_kept(harness, traffic, 4)
    assert header(harness, run_id).stop_reason == BUDGET_EXHAUSTED


async def test_a_request_within_its_budget_is_not_stopped(harness: Harness) -> None:
    harness.platform.scripts["ultron~similarweb-bulk"] = Script(
        items=4, polls_to_finish=3, usage=[0.1, 0.2, 0.3]
    )
    run_id, result = await run_to_end(harness, in_workspace(budgeted(1.0, TRAFFIC)))
    assert result.state == RunState.SUCCEEDED
    assert header(harness, run_id).stop_reason is None
    assert event_kinds(harness, run_id)["run.budget_exhausted"] == 0


async def test_a_spent_workspace_limit_stops_the_request_and_refuses_the_next(
    make_harness: HarnessFactory, own_engine: Engine
) -> None:
    async with make_harness(own_engine) as h:
        h.platform.scripts["ultron~similarweb-bulk"] = Script(
            items=6, polls_to_finish=FOREVER, usage=[0.1, 0.2, 0.3, 0.4]
        )
        body = in_workspace(request(TRAFFIC))
        assert body.workspace_id is not None
        with h.engine.begin() as conn:
            budget_queries.set_workspace_limit(
                conn, body.workspace_id, 0.25, BudgetPeriod.DAY, new_nonce
            )
        run_id, result = await run_to_end(h, body)
        assert result.state == RunState.ABORTED
        run = header(h, run_id)
        assert run.stop_reason == BUDGET_EXHAUSTED
        assert run.stop_message and "daily budget of $0.25 is spent" in run.stop_message
        (child,) = children(h, run_id)
        assert_kept(h, child, 6)
        with pytest.raises(WorkspaceBudgetExhausted, match=r"daily budget of \$0\.25 is spent"):
            await submit(h, dataclasses.replace(body))
        with h.engine.connect() as conn:
            assert count_runs(conn, body.workspace_id) == 1, "the refused request was stored"
        with h.engine.connect() as conn:
            status = budget_queries.limit_status(conn, body.workspace_id)
        assert status is not None and status.exhausted


async def test_a_worker_lost_during_the_budget_abort_leaves_nothing_running_or_doubled(
    make_harness: HarnessFactory, own_engine: Engine
) -> None:
    """Point 7: the first worker dies while the platform has not confirmed the aborts; a
    new worker on the same task queue finishes the cascade from Temporal's history."""
    async with make_harness(own_engine) as first:
        first.platform.scripts["ultron~similarweb-bulk"] = Script(
            items=11, polls_to_finish=FOREVER, usage=[0.3, 0.6, 0.9, 1.2]
        )
        first.platform.scripts["ultron~leadgen"] = Script(items=8, polls_to_finish=FOREVER)
        abort = first.platform.abort_run
        aborts_tried: list[str] = []

        async def unconfirmed_abort(run_id: str, *, gracefully: bool = False) -> None:
            aborts_tried.append(run_id)
            raise retryable("the platform did not answer the abort")

        first.platform.abort_run = unconfirmed_abort  # type: ignore[method-assign]
        run_id = await submit(first, in_workspace(budgeted(1.0, TRAFFIC, LEADS)))
        await eventually_async(lambda: len(aborts_tried) >= 2, timeout=60)
        platform = first.platform
        task_queue = first.task_queue
    # The first worker is gone mid-cascade; a second one (same platform, same database)
    # takes over the same task queue.
    platform.abort_run = abort  # type: ignore[method-assign]
    async with make_harness(own_engine, task_queue=task_queue, platform=platform) as second:
        # Retries of the unconfirmed aborts back off (ABORT_RETRY) before the new worker
        # gets them: on a loaded machine that can take a while.
        result = await result_of(second, run_id, timeout=240)
        assert result.state == RunState.ABORTED
        assert all(r.aborted for r in platform.runs.values())
        assert len(platform.runs) == 2, "a platform run was started twice"
        traffic, leads = children(second, run_id)
        assert_kept(second, traffic, 11)
        assert_kept(second, leads, 8)
        assert event_kinds(second, run_id)["run.budget_exhausted"] == 1
        assert_spend_is_the_childrens(second, run_id)
