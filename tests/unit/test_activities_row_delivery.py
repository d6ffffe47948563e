"""The ``push_row_batch`` activity without a Temporal server (ActivityEnvironment), against a
local receiver: batches in item order within the caps, each signed, the cursor in the
database moved only by an acknowledged batch, a retried batch identical (same webhook-id,
seq and body), Retry-After honoured, a refused batch ending the child's push (SQLite and
PostgreSQL)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from sqlalchemy import Engine
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from orchestrator.activities.deps import ActivityDeps
from orchestrator.activities.row_delivery import RowDeliveryActivities
from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries import items as item_queries
from orchestrator.db.queries import row_deliveries as cursor_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.queries.workspaces import get_workspace
from orchestrator.delivery.signing import verify
from orchestrator.domain.ids import child_id, new_run_id
from orchestrator.domain.lifecycle import ChildState
from orchestrator.security.callback_secrets import derive_callback_secret
from orchestrator.workflows.policies import ERR_ROWS_PERMANENT
from orchestrator.workflows.types import PushRowsInput, PushRowsResult

# db_url replaces tests/conftest.py's: PostgreSQL is this module's own database.
from tests.support.receiver import Received, callback_receiver
from tests.workflows.activity_support import db_url, worker_config  # noqa: F401
from tests.workflows.fakes import FakePlatform

SERVER_KEY = "row-delivery-test-key"
WORKSPACE = "ws_rows"


def final_child(
    engine: Engine,
    url: str | None,
    rows: list[dict[str, Any]],
    *,
    deliver_rows: str = "callback",
) -> tuple[str, str]:
    """A request whose only child succeeded with ``rows`` stored; its run and child ids."""
    run_id = new_run_id()
    cid = child_id(run_id, 0)
    run = run_queries.NewRun(
        id=run_id,
        workspace_id=WORKSPACE,
        conversation_id=None,
        skill_run_id="skill_rows",
        callback_url=url,
        children=(
            run_queries.NewChild(
                id=cid,
                idx=0,
                actor="ultron-leadgen",
                platform_actor_id="ultron~leadgen",
                input={},
                options={},
            ),
        ),
        deliver_rows=deliver_rows,
    )
    with engine.begin() as conn:
        run_queries.insert_run(conn, run)
        run_queries.transition_child(
            conn, cid, ChildState.RUNNING, platform_run_id="P", dataset_id="D"
        )
        run_queries.transition_child(conn, cid, ChildState.INGESTING)
        record = run_queries.get_run(conn, run_id)
        child = run_queries.get_child(conn, cid)
        assert record is not None and child is not None
        item_queries.write_page(conn, record, child, 0, [json.dumps(r).encode() for r in rows])
        run_queries.transition_child(conn, cid, ChildState.SUCCEEDED)
    return run_id, cid


def pusher(engine: Engine, **config: Any) -> RowDeliveryActivities:
    settings = {
        "callback_secret_key": SERVER_KEY,
        "allow_insecure_callback_localhost": True,
        "callback_retry_initial_seconds": 0.05,
        "row_batch_max_rows": 10,
    } | config
    return RowDeliveryActivities(
        ActivityDeps(engine=engine, platform=FakePlatform(), config=worker_config(**settings))
    )


async def push(activities: RowDeliveryActivities, cid: str, *, attempt: int = 1) -> PushRowsResult:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=attempt)
    return await env.run(activities.push_row_batch, PushRowsInput(child_id=cid))


def secret(engine: Engine) -> str:
    with engine.connect() as conn:
        workspace = get_workspace(conn, WORKSPACE)
    assert workspace is not None
    return derive_callback_secret(SERVER_KEY, WORKSPACE, workspace.secret_nonce)


def cursor(engine: Engine, cid: str) -> cursor_queries.RowDelivery:
    with engine.connect() as conn:
        found = cursor_queries.get_delivery(conn, cid)
    assert found is not None
    return found


def lines(received: Received) -> list[dict[str, Any]]:
    return [json.loads(line) for line in received.body.decode("utf-8").splitlines()]


async def test_batches_go_in_item_order_within_the_row_cap(engine: Engine) -> None:
    with callback_receiver() as receiver:
        run_id, cid = final_child(engine, receiver.url, [{"n": i} for i in range(25)])
        activities = pusher(engine)
        results = [await push(activities, cid) for _ in range(3)]
        assert [r.done for r in results] == [False, False, True]
        assert [(r.seq, r.rows) for r in results] == [(1, 10), (2, 10), (3, 5)]
        assert (results[-1].batches_pushed, results[-1].rows_pushed) == (3, 25)
        # Nothing is left: a further call sends nothing.
        again = await push(activities, cid)
        assert again.done and again.seq == 0
    assert len(receiver.received) == 3
    key = secret(engine)
    seen: list[int] = []
    for seq, received in enumerate(receiver.received, start=1):
        headers = received.headers
        verify(key, received.body, headers, json_parse=False)
        assert headers["content-type"] == "application/x-ndjson"
        assert headers["webhook-id"] == f"rows_{cid.replace('.', '_')}_{seq}"
        assert headers["x-orchestrator-batch-seq"] == str(seq)
        assert headers["x-orchestrator-run-id"] == run_id
        assert headers["x-orchestrator-child-id"] == cid
        assert headers["x-orchestrator-batch-last"] == ("true" if seq == 3 else "false")
        assert headers["x-orchestrator-child-rows-total"] == "25"
        rows = lines(received)
        assert headers["x-orchestrator-first-item-index"] == str(rows[0]["itemIndex"])
        assert headers["x-orchestrator-last-item-index"] == str(rows[-1]["itemIndex"])
        assert all(r["childId"] == cid and r["skillId"] == "skill_rows" for r in rows)
        seen += [r["data"]["n"] for r in rows]
    assert seen == list(range(25))  # every row once, in order
    done = cursor(engine, cid)
    assert (done.state, done.next_seq, done.next_index, done.rows_pushed) == ("done", 4, 25, 25)
    with engine.connect() as conn:
        kinds = [e.kind for e in event_queries.list_events(conn, run_id)]
    assert kinds.count("rows.batch_delivered") == 3 and kinds.count("rows.pushed") == 1


async def test_the_byte_cap_and_a_huge_row(engine: Engine) -> None:
    big = "x" * 5000
    rows: list[dict[str, Any]] = [{"n": 0}, {"n": 1}, {"n": 2, "big": big}, {"n": 3}, {"n": 4}]
    with callback_receiver() as receiver:
        _, cid = final_child(engine, receiver.url, rows)
        activities = pusher(engine, row_batch_max_bytes=1000)
        while not (await push(activities, cid)).done:
            pass
    sizes = [len(lines(r)) for r in receiver.received]
    assert sizes == [2, 1, 2]  # the 5 kB row alone, above the 1000-byte cap
    assert all(len(r.body) <= 1000 for i, r in enumerate(receiver.received) if i != 1)
    assert [row["data"]["n"] for r in receiver.received for row in lines(r)] == [0, 1, 2, 3, 4]


async def test_a_retried_batch_is_the_same_batch_and_honours_retry_after(
    engine: Engine,
) -> None:
    with callback_receiver([503, 200]) as receiver:
        receiver.retry_after = "7"
        run_id, cid = final_child(engine, receiver.url, [{"n": i} for i in range(12)])
        # The cap changes between the attempts: the batch planned first is still the one sent.
        with pytest.raises(ApplicationError) as raised:
            await push(pusher(engine), cid, attempt=1)
        assert not raised.value.non_retryable
        assert raised.value.next_retry_delay is not None
        assert raised.value.next_retry_delay.total_seconds() == 7.0
        pending = cursor(engine, cid)
        assert (pending.next_seq, pending.next_index, pending.pending_end) == (1, 0, 10)
        result = await push(pusher(engine, row_batch_max_rows=3), cid, attempt=2)
        assert (result.seq, result.rows, result.done) == (1, 10, False)
    first, second = receiver.received
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert first.headers["x-orchestrator-batch-seq"] == second.headers["x-orchestrator-batch-seq"]
    assert first.body == second.body
    assert first.headers["webhook-signature"] and second.headers["webhook-timestamp"]
    moved = cursor(engine, cid)
    assert (moved.next_seq, moved.next_index, moved.pending_end) == (2, 10, None)
    with engine.connect() as conn:
        attempts = [
            e for e in event_queries.list_events(conn, run_id) if e.kind == "rows.batch_attempt"
        ]
    assert len(attempts) == 1 and attempts[0].data is not None
    assert attempts[0].data["statusCode"] == 503 and attempts[0].data["retryInSeconds"] == 7.0
    assert "/hook" not in json.dumps(attempts[0].data)


async def test_a_refused_batch_ends_the_childs_push(engine: Engine) -> None:
    with callback_receiver([200, 400]) as receiver:
        run_id, cid = final_child(engine, receiver.url, [{"n": i} for i in range(25)])
        activities = pusher(engine)
        assert not (await push(activities, cid)).done
        with pytest.raises(ApplicationError) as raised:
            await push(activities, cid)
        assert raised.value.non_retryable and raised.value.type == ERR_ROWS_PERMANENT
        after = await push(activities, cid)
        assert after.done and after.seq == 0 and after.rows_pushed == 10
    assert len(receiver.received) == 2
    stopped = cursor(engine, cid)
    assert (stopped.state, stopped.failed_seq, stopped.rows_pushed) == ("failed", 2, 10)
    with engine.connect() as conn:
        events = event_queries.list_events(conn, run_id)
        state = run_queries.get_child(conn, cid)
    assert [e.kind for e in events].count("rows.batch_failed") == 1
    assert state is not None and state.state is ChildState.SUCCEEDED  # unchanged


async def test_nothing_is_pushed_unless_asked_or_without_rows(engine: Engine) -> None:
    with callback_receiver() as receiver:
        _, quiet = final_child(engine, receiver.url, [{"n": 1}], deliver_rows="none")
        _, empty = final_child(engine, receiver.url, [])
        activities = pusher(engine)
        assert (await push(activities, quiet)).done
        assert (await push(activities, empty)).done
    assert receiver.received == []
    assert cursor(engine, empty).state == "done"
    with engine.connect() as conn:
        assert cursor_queries.get_delivery(conn, quiet) is None
