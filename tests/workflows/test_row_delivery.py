"""Rows pushed to the callback on a real Temporal server, with a local receiver (SQLite, and
PostgreSQL for the main paths): each child's rows in signed batches, in order, before the
summary callback (which counts them); a batch the receiver fails twice is sent again
unchanged and nothing is skipped; a worker lost in the middle of a push is replaced and the
push resumes from the last acknowledged batch; aborts; a long push continuing-as-new."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from sqlalchemy import Engine
from temporalio.worker import Replayer

from orchestrator.api.schemas import CreateRunRequest
from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries.workspaces import get_workspace
from orchestrator.delivery.row_batches import HEADER_SEQ
from orchestrator.domain.ids import child_id, poller_workflow_id
from orchestrator.domain.lifecycle import RunState
from orchestrator.security.callback_secrets import derive_callback_secret
from orchestrator.service.commands import SubmitRequest
from orchestrator.service.control import abort_request
from orchestrator.service.submission import SubmissionPolicy, submit
from orchestrator.worker import WORKFLOWS
from orchestrator.workflows.row_delivery import BATCHES_PER_RUN, row_delivery_workflow_id
from tests.support.receiver import Received, assemble_row_batches, callback_receiver, is_row_batch
from tests.support.waiting import eventually_async
from tests.workflows.conftest import Harness, HarnessFactory
from tests.workflows.fakes import Script, hold_starts_until_cancelled
from tests.workflows.support import result_of, wait_for_workflow

SERVER_KEY = "row-push-workflow-key"
OVERRIDES: dict[str, Any] = {
    "callback_secret_key": SERVER_KEY,
    "allow_insecure_callback_localhost": True,
    "callback_retry_initial_seconds": 0.05,
    "row_batch_max_rows": 10,
}
LEADS = {"actor": "ultron-leadgen", "input": {}}
TRAFFIC = {"actor": "ultron-similarweb-bulk", "input": {"domains": ["a.com"]}}


def pushing(url: str, *runs: dict[str, Any]) -> SubmitRequest:
    return CreateRunRequest.model_validate(
        {
            "workspaceId": "ws_test",
            "callbackWebhook": url,
            "deliver": {"rows": "callback"},
            "runs": list(runs),
        }
    ).to_command()


async def start(h: Harness, body: SubmitRequest) -> str:
    policy = SubmissionPolicy(allow_insecure_callback_localhost=True)
    return (await submit(h.engine, h.env.client, h.task_queue, body, policy=policy)).run.id


def secret_of(engine: Engine) -> str:
    with engine.connect() as conn:
        workspace = get_workspace(conn, "ws_test")
    assert workspace is not None
    return derive_callback_secret(SERVER_KEY, "ws_test", workspace.secret_nonce)


def summary(received: list[Received]) -> dict[str, Any]:
    (final,) = [r for r in received if not is_row_batch(r)]
    assert received[-1] is final, "the summary callback came before a batch"
    data: dict[str, Any] = json.loads(final.body)["data"]
    return data


async def test_rows_of_two_children_arrive_in_order_before_the_summary(
    make_harness: HarnessFactory, own_engine: Engine
) -> None:
    async with make_harness(own_engine, **OVERRIDES) as h:
        h.platform.scripts["ultron~leadgen"] = Script(items=23, polls_to_finish=2)
        h.platform.scripts["ultron~similarweb-bulk"] = Script(items=7)
        with callback_receiver() as receiver:
            run_id = await start(h, pushing(receiver.url, LEADS, TRAFFIC))
            assert (await result_of(h, run_id)).state == RunState.SUCCEEDED
    pushed = assemble_row_batches(receiver.received, secret_of(own_engine))
    leads, traffic = f"{run_id}.0", f"{run_id}.1"
    assert pushed.seqs == {leads: [1, 2, 3], traffic: [1]}
    assert [r["itemIndex"] for r in pushed.rows[leads]] == list(range(23))
    assert [r["itemIndex"] for r in pushed.rows[traffic]] == list(range(7))
    assert pushed.finished == {leads, traffic} and pushed.duplicates == 0
    assert all(r["runId"] == run_id for rows in pushed.rows.values() for r in rows)
    data = summary(receiver.received)
    counts = {c["childId"]: c["rowsPushed"] for c in data["children"]}
    assert counts[leads] == {
        "batches": 3,
        "rows": 23,
        "rowsTotal": 23,
        "complete": True,
        "failedBatchSeq": None,
    }
    assert counts[traffic]["batches"] == 1 and counts[traffic]["complete"]


async def test_a_batch_failed_twice_is_sent_again_unchanged_and_nothing_is_skipped(
    make_harness: HarnessFactory, own_engine: Engine
) -> None:
    async with make_harness(own_engine, **OVERRIDES) as h:
        h.platform.scripts["ultron~leadgen"] = Script(items=25)
        # Batch 1 is accepted, batch 2 fails twice (503, then 500) and is then accepted.
        with callback_receiver([200, 503, 500]) as receiver:
            run_id = await start(h, pushing(receiver.url, LEADS))
            assert (await result_of(h, run_id)).state == RunState.SUCCEEDED
    batches = [r for r in receiver.received if is_row_batch(r)]
    assert [b.headers["x-orchestrator-batch-seq"] for b in batches] == ["1", "2", "2", "2", "3"]
    second = batches[1:4]
    assert len({b.headers["webhook-id"] for b in second}) == 1
    assert len({b.body for b in second}) == 1
    pushed = assemble_row_batches(receiver.received, secret_of(own_engine))
    assert pushed.duplicates == 2
    assert [r["itemIndex"] for r in pushed.rows[f"{run_id}.0"]] == list(range(25))
    assert summary(receiver.received)["children"][0]["rowsPushed"]["rows"] == 25
    with own_engine.connect() as conn:
        kinds = [e.kind for e in event_queries.list_events(conn, run_id, limit=1000)]
    assert kinds.count("rows.batch_attempt") == 2 and kinds.count("rows.batch_delivered") == 3


async def test_a_refused_batch_is_recorded_and_the_run_still_succeeds(
    make_harness: HarnessFactory, sqlite_engine: Engine
) -> None:
    async with make_harness(sqlite_engine, **OVERRIDES) as h:
        h.platform.scripts["ultron~leadgen"] = Script(items=25)
        with callback_receiver([200, 413]) as receiver:
            run_id = await start(h, pushing(receiver.url, LEADS))
            assert (await result_of(h, run_id)).state == RunState.SUCCEEDED
    assert [r.headers.get("x-orchestrator-batch-seq") for r in receiver.received] == [
        "1",
        "2",
        None,  # the summary, after the push was given up
    ]
    pushed = summary(receiver.received)["children"][0]["rowsPushed"]
    assert pushed == {
        "batches": 1,
        "rows": 10,
        "rowsTotal": 25,
        "complete": False,
        "failedBatchSeq": 2,
    }
    with sqlite_engine.connect() as conn:
        kinds = [e.kind for e in event_queries.list_events(conn, run_id, limit=1000)]
    assert kinds.count("rows.batch_failed") == 1 and "callback.delivered" in kinds


async def test_a_push_resumes_after_its_worker_is_lost(
    make_harness: HarnessFactory, own_engine: Engine
) -> None:
    with callback_receiver([200] + [503] * 1000) as receiver:
        async with make_harness(own_engine, **OVERRIDES) as first:
            first.platform.scripts["ultron~leadgen"] = Script(items=35)
            run_id = await start(first, pushing(receiver.url, LEADS))
            # Batch 1 acknowledged, batch 2 failing: the worker goes away mid-push.
            await eventually_async(lambda: len(receiver.received) >= 3, timeout=60)
            platform, task_queue = first.platform, first.task_queue
        receiver.statuses.clear()  # the receiver recovers; a new worker takes over
        async with make_harness(
            own_engine, task_queue=task_queue, platform=platform, **OVERRIDES
        ) as second:
            assert (await result_of(second, run_id)).state == RunState.SUCCEEDED
    batches = [r for r in receiver.received if is_row_batch(r)]
    seqs = [b.headers["x-orchestrator-batch-seq"] for b in batches]
    assert seqs.count("1") == 1, "an acknowledged batch was sent again"
    assert seqs[-3:] == ["2", "3", "4"]
    pushed = assemble_row_batches(receiver.received, secret_of(own_engine))
    assert pushed.seqs[f"{run_id}.0"] == [1, 2, 3, 4]
    assert [r["itemIndex"] for r in pushed.rows[f"{run_id}.0"]] == list(range(35))
    assert summary(receiver.received)["children"][0]["rowsPushed"]["complete"]


async def test_no_rows_are_pushed_unless_asked(
    make_harness: HarnessFactory, sqlite_engine: Engine
) -> None:
    async with make_harness(sqlite_engine, **OVERRIDES) as h:
        with callback_receiver() as receiver:
            body = CreateRunRequest.model_validate(
                {"workspaceId": "ws_test", "callbackWebhook": receiver.url, "runs": [LEADS]}
            ).to_command()
            run_id = await start(h, body)
            assert (await result_of(h, run_id)).state == RunState.SUCCEEDED
    (only,) = receiver.received
    assert not is_row_batch(only)
    assert "rowsPushed" not in json.loads(only.body)["data"]["children"][0]


async def test_a_long_push_continues_as_new_and_its_histories_replay(
    make_harness: HarnessFactory, sqlite_engine: Engine
) -> None:
    rows = BATCHES_PER_RUN + 6  # one row per batch: the delivery workflow continues-as-new
    async with make_harness(sqlite_engine, **(OVERRIDES | {"row_batch_max_rows": 1})) as h:
        h.platform.scripts["ultron~leadgen"] = Script(items=rows)
        with callback_receiver() as receiver:
            run_id = await start(h, pushing(receiver.url, LEADS))
            assert (await result_of(h, run_id)).state == RunState.SUCCEEDED
        cid = child_id(run_id, 0)
        delivery = h.env.client.get_workflow_handle(row_delivery_workflow_id(cid))
        described = await delivery.describe()  # the latest run, started by a continue-as-new
        assert described.raw_description.workflow_execution_info.first_run_id != described.run_id
        histories = [
            await h.env.client.get_workflow_handle(wid).fetch_history()
            for wid in (poller_workflow_id(cid), row_delivery_workflow_id(cid))
        ]
    pushed = assemble_row_batches(receiver.received, secret_of(sqlite_engine))
    assert pushed.seqs[cid] == list(range(1, rows + 1))
    assert summary(receiver.received)["children"][0]["rowsPushed"]["batches"] == rows
    replayer = Replayer(workflows=WORKFLOWS)
    for history in histories:
        await replayer.replay_workflow(history)


async def test_rows_of_a_child_aborted_before_its_poller_are_pushed_by_the_sweep(
    make_harness: HarnessFactory, sqlite_engine: Engine
) -> None:
    """The abort reaches the start in flight, so the child never gets a poller: the master's
    sweep ingests its rows and pushes them before the summary."""
    async with make_harness(sqlite_engine, **OVERRIDES) as h:
        entered = hold_starts_until_cancelled(h.platform)
        h.platform.scripts["ultron~leadgen"] = Script(items=12, polls_to_finish=10**9)
        with callback_receiver() as receiver:
            run_id = await start(h, pushing(receiver.url, LEADS))
            await asyncio.wait_for(entered.wait(), timeout=30)
            assert (await abort_request(h.engine, h.env.client, run_id)).accepted
            assert (await result_of(h, run_id)).state == RunState.ABORTED
    pushed = assemble_row_batches(receiver.received, secret_of(sqlite_engine))
    cid = child_id(run_id, 0)
    assert pushed.seqs[cid] == [1, 2]
    assert [r["itemIndex"] for r in pushed.rows[cid]] == list(range(12))
    (child,) = summary(receiver.received)["children"]
    assert child["state"] == "aborted" and child["rowsPushed"]["complete"]


async def test_an_aborted_child_pushes_the_rows_it_kept(
    make_harness: HarnessFactory, sqlite_engine: Engine
) -> None:
    """A caller's abort reaches a running child: its poller stops the run, ingests the rows
    it kept, pushes them, then reports; the summary comes last."""
    async with make_harness(sqlite_engine, **OVERRIDES) as h:
        h.platform.scripts["ultron~leadgen"] = Script(items=15, polls_to_finish=10**9)
        with callback_receiver() as receiver:
            run_id = await start(h, pushing(receiver.url, LEADS))
            cid = child_id(run_id, 0)
            await wait_for_workflow(h, poller_workflow_id(cid))
            assert (await abort_request(h.engine, h.env.client, run_id)).accepted
            assert (await result_of(h, run_id)).state == RunState.ABORTED
    pushed = assemble_row_batches(receiver.received, secret_of(sqlite_engine))
    assert pushed.seqs[cid] == [1, 2]
    assert [r["itemIndex"] for r in pushed.rows[cid]] == list(range(15))
    (child,) = summary(receiver.received)["children"]
    assert child["state"] == "aborted" and child["partial"]
    assert child["rowsPushed"]["rows"] == 15


async def test_an_abort_during_a_push_stops_it_and_the_summary_says_so(
    make_harness: HarnessFactory, sqlite_engine: Engine
) -> None:
    """One child has ended and is pushing (its batch 2 refused with 503) while the other
    still runs: the caller aborts. The push stops there; the running child is aborted, its
    kept rows pushed (a single batch, accepted); the summary says which push is incomplete."""
    async with make_harness(sqlite_engine, **OVERRIDES) as h:
        h.platform.scripts["ultron~leadgen"] = Script(items=25)
        h.platform.scripts["ultron~similarweb-bulk"] = Script(items=4, polls_to_finish=10**9)
        with callback_receiver() as receiver:
            # Every batch after a child's first is refused, whenever it comes: the leads'
            # batch 2 is retried until the abort stops its push.
            receiver.status_for = lambda got: (
                503 if is_row_batch(got) and int(got.headers[HEADER_SEQ]) >= 2 else None
            )
            run_id = await start(h, pushing(receiver.url, LEADS, TRAFFIC))
            await eventually_async(lambda: len(receiver.received) >= 3, timeout=60)
            assert (await abort_request(h.engine, h.env.client, run_id)).accepted
            assert (await result_of(h, run_id)).state == RunState.ABORTED
    leads, traffic = child_id(run_id, 0), child_id(run_id, 1)
    (final,) = [r for r in receiver.received if not is_row_batch(r)]
    data = json.loads(final.body)["data"]
    pushed_counts = {c["childId"]: c["rowsPushed"] for c in data["children"]}
    states = {c["childId"]: c["state"] for c in data["children"]}
    assert states == {leads: "succeeded", traffic: "aborted"}
    assert pushed_counts[leads]["complete"] is False
    pushed = assemble_row_batches(receiver.received, secret_of(sqlite_engine))
    # Batch 1 accepted; batch 2 refused (the receiver records it if it was tried before the
    # abort) until the push stopped; never batch 3, never a gap.
    assert [r["itemIndex"] for r in pushed.rows[leads]] in (list(range(10)), list(range(20)))
    assert pushed_counts[leads]["rows"] == 10
    assert [r["itemIndex"] for r in pushed.rows[traffic]] == list(range(4))
    assert pushed_counts[traffic]["complete"] is True
