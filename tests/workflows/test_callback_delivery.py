"""The callback step on a real Temporal server with a local receiver: signed, retried on
5xx/408/429, stopped by other 4xx, every attempt in scrape_events, no secret anywhere."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import standardwebhooks
from sqlalchemy import Engine

from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries.workspaces import get_workspace
from orchestrator.domain.lifecycle import RunState
from orchestrator.security.callback_secrets import derive_callback_secret
from orchestrator.service.submission import SubmissionPolicy, submit
from tests.support.receiver import callback_receiver
from tests.workflows.conftest import HarnessFactory
from tests.workflows.support import request, result_of

SERVER_KEY = "workflow-test-callback-key"
OVERRIDES: dict[str, Any] = {
    "callback_secret_key": SERVER_KEY,
    "allow_insecure_callback_localhost": True,
    "callback_retry_initial_seconds": 0.05,
}


def events_of(engine: Engine, run_id: str) -> list[event_queries.EventRecord]:
    with engine.connect() as conn:
        return event_queries.list_events(conn, run_id)


@pytest.mark.parametrize(
    ("statuses", "attempts", "delivered"),
    [
        ([503, 500, 200], 3, True),
        ([429, 408, 204], 3, True),
        ([400], 1, False),
        ([410], 1, False),
        ([302], 1, False),
    ],
)
async def test_callback_is_signed_retried_and_recorded(
    make_harness: HarnessFactory,
    sqlite_engine: Engine,
    statuses: list[int],
    attempts: int,
    delivered: bool,
) -> None:
    async with make_harness(sqlite_engine, **OVERRIDES) as h:
        with callback_receiver(statuses) as receiver:
            body = dataclasses.replace(
                request({"actor": "ultron-leadgen", "input": {}}),
                callback_webhook=receiver.url + "?token=sekrit-token",
            )
            record = (
                await submit(
                    h.engine,
                    h.env.client,
                    h.task_queue,
                    body,
                    policy=SubmissionPolicy(allow_insecure_callback_localhost=True),
                )
            ).run
            result = await result_of(h, record.id)
        assert result.state == RunState.SUCCEEDED  # a callback never changes the outcome
        assert len(receiver.received) == attempts

    with sqlite_engine.connect() as conn:
        workspace = get_workspace(conn, "ws_test")
    assert workspace is not None
    secret = derive_callback_secret(SERVER_KEY, "ws_test", workspace.secret_nonce)
    ids = {r.headers["webhook-id"] for r in receiver.received}
    assert len(ids) == 1  # stable across retries
    for received in receiver.received:
        assert received.path == "/hook?token=sekrit-token"
        payload = standardwebhooks.Webhook(secret).verify(received.body, received.headers)
        assert payload["data"]["runId"] == record.id
    assert len({r.body for r in receiver.received}) == 1
    data = json.loads(receiver.received[0].body)["data"]
    assert data["state"] == "succeeded" and data["workspaceId"] == "ws_test"
    assert data["skillId"] == "skill_1" and data["conversationId"] == "c_1"
    assert data["children"][0]["itemCount"] == 10

    events = events_of(sqlite_engine, record.id)
    tries = [e for e in events if e.kind == "callback.attempt"]
    assert [e.data["attempt"] for e in tries if e.data] == list(range(1, attempts + 1))
    assert [e.data["statusCode"] for e in tries if e.data] == statuses[:attempts]
    assert {e.kind for e in events} >= {"callback.delivered" if delivered else "callback.failed"}
    dump = json.dumps([(e.message, e.data) for e in events])
    assert secret not in dump and "sekrit" not in dump and "/hook" not in dump


async def test_no_callback_without_a_url(
    make_harness: HarnessFactory, sqlite_engine: Engine
) -> None:
    async with make_harness(sqlite_engine, **OVERRIDES) as h:
        record = (
            await submit(h.engine, h.env.client, h.task_queue, request({"actor": "ultron-leadgen"}))
        ).run
        assert (await result_of(h, record.id)).state == RunState.SUCCEEDED
    assert not [e for e in events_of(sqlite_engine, record.id) if e.kind.startswith("callback")]
