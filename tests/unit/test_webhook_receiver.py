"""The platform webhook use case (``service.webhooks``) and its route, in process.

Each refusal (401 token, 413 size, 400 body, 404 child, 409 other run) leaves no event and
sends no signal; a bad token is refused before the body is read. A good delivery is logged
once per dispatch id and wakes the child's poller, whose absence is not an error, unless the
child is already past its platform run.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from sqlalchemy import Engine
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.domain.errors import DomainError, NotFound
from orchestrator.domain.ids import child_id, new_run_id, poller_workflow_id
from orchestrator.domain.lifecycle import ChildState
from orchestrator.platform.webhook_auth import WEBHOOK_TOKEN_HEADER, derive_webhook_token
from orchestrator.service.commands import PlatformWebhook
from orchestrator.service.errors import (
    MalformedBody,
    PayloadTooLarge,
    RunMismatch,
    WebhookUnauthorized,
)
from orchestrator.service.webhooks import MAX_WEBHOOK_BYTES, receive_platform_webhook
from tests.unit.api_harness import Api, api_for

SECRET = "test-webhook-secret"


@dataclass
class SignalRecorder:
    signals: list[tuple[str, str, Any]] = field(default_factory=list)
    missing: bool = False

    def get_workflow_handle(self, workflow_id: str) -> SignalRecorder._Handle:
        return SignalRecorder._Handle(self, workflow_id)

    @dataclass
    class _Handle:
        owner: SignalRecorder
        workflow_id: str

        async def signal(self, name: str, arg: Any) -> None:
            if self.owner.missing:
                raise RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")
            self.owner.signals.append((self.workflow_id, name, arg))


def started_child(engine: Engine, platform_run_id: str = "P1") -> tuple[str, str]:
    run_id = new_run_id()
    child = child_id(run_id, 0)
    new = run_queries.NewRun(
        id=run_id,
        workspace_id="ws_hooks",
        conversation_id=None,
        skill_run_id=None,
        callback_url=None,
        children=(
            run_queries.NewChild(
                id=child,
                idx=0,
                actor="ultron-leadgen",
                platform_actor_id="ultron~leadgen",
                input={},
                options={},
            ),
        ),
    )
    with engine.begin() as conn:
        run_queries.insert_run(conn, new)
        run_queries.transition_child(
            conn, child, ChildState.RUNNING, platform_run_id=platform_run_id, dataset_id="D1"
        )
    return run_id, child


def webhook_events(engine: Engine, run_id: str) -> list[event_queries.EventRecord]:
    with engine.connect() as conn:
        return [e for e in event_queries.list_events(conn, run_id) if e.kind == "child.webhook"]


def payload(platform_run_id: str = "P1", event: str = "ACTOR.RUN.SUCCEEDED") -> bytes:
    return json.dumps({"eventType": event, "resource": {"id": platform_run_id}}).encode()


class Body:
    """A body source that records whether (and with which limit) it was read."""

    def __init__(self, content: bytes | None) -> None:
        self.content = content
        self.limits: list[int] = []

    async def __call__(self, limit: int) -> bytes | None:
        self.limits.append(limit)
        return self.content


def hook(
    child: str, body: Body, *, token: str | None = None, dispatch: str = "d1"
) -> PlatformWebhook:
    return PlatformWebhook(
        child_id=child,
        token=derive_webhook_token(SECRET, child) if token is None else token,
        dispatch_id=dispatch,
        read_body=body,
    )


async def test_a_good_delivery_is_logged_once_per_dispatch_and_wakes_the_poller(
    sqlite_engine: Engine,
) -> None:
    run_id, child = started_child(sqlite_engine)
    temporal = SignalRecorder()
    client = cast(Client, temporal)
    for _ in range(2):  # the platform may deliver the same dispatch twice
        await receive_platform_webhook(sqlite_engine, client, SECRET, hook(child, Body(payload())))
    events = webhook_events(sqlite_engine, run_id)
    assert len(events) == 1 and events[0].child_id == child
    assert events[0].data == {
        "eventType": "ACTOR.RUN.SUCCEEDED",
        "dispatchId": "d1",
        "platformRunId": "P1",
    }
    assert [(w, s) for w, s, _ in temporal.signals] == [
        (poller_workflow_id(child), "platform_signal")
    ] * 2
    assert temporal.signals[0][2].event_type == "ACTOR.RUN.SUCCEEDED"
    # A finished poller (or none yet) is fine: polling covers it.
    temporal.missing = True
    await receive_platform_webhook(
        sqlite_engine, client, SECRET, hook(child, Body(payload()), dispatch="d2")
    )
    assert len(webhook_events(sqlite_engine, run_id)) == 2


@pytest.mark.parametrize("state", [ChildState.INGESTING, ChildState.SUCCEEDED])
async def test_a_delivery_for_a_run_already_seen_over_is_logged_but_wakes_nobody(
    sqlite_engine: Engine, state: ChildState
) -> None:
    """The poller's own look often sees the end first: the webhook is still logged, but a
    signal would only cost a workflow task while the ingest starts."""
    run_id, child = started_child(sqlite_engine)
    with sqlite_engine.begin() as conn:
        run_queries.transition_child(conn, child, ChildState.INGESTING)
        run_queries.transition_child(conn, child, state)
    temporal = SignalRecorder()
    await receive_platform_webhook(
        sqlite_engine, cast(Client, temporal), SECRET, hook(child, Body(payload()))
    )
    assert len(webhook_events(sqlite_engine, run_id)) == 1
    assert temporal.signals == []


@pytest.mark.parametrize(
    ("token", "content", "error"),
    [
        ("", payload(), WebhookUnauthorized),
        ("0" * 64, payload(), WebhookUnauthorized),
        (None, None, PayloadTooLarge),
        (None, b"{not json", MalformedBody),
        (None, b"[1, 2]", MalformedBody),
        (None, payload("someOtherRun"), RunMismatch),
    ],
)
async def test_refusals_have_no_side_effect(
    sqlite_engine: Engine, token: str | None, content: bytes | None, error: type[DomainError]
) -> None:
    run_id, child = started_child(sqlite_engine)
    temporal = SignalRecorder()
    body = Body(content)
    with pytest.raises(error):
        await receive_platform_webhook(
            sqlite_engine, cast(Client, temporal), SECRET, hook(child, body, token=token)
        )
    assert webhook_events(sqlite_engine, run_id) == [] and temporal.signals == []
    # The body of an unauthenticated delivery is never read; others up to the limit.
    assert body.limits == ([] if error is WebhookUnauthorized else [MAX_WEBHOOK_BYTES])


async def test_a_token_for_an_unknown_child_is_404_and_one_for_another_child_401(
    sqlite_engine: Engine,
) -> None:
    _, child = started_child(sqlite_engine)
    temporal = cast(Client, SignalRecorder())
    with pytest.raises(NotFound):
        await receive_platform_webhook(
            sqlite_engine, temporal, SECRET, hook("nope.0", Body(payload()))
        )
    other = derive_webhook_token(SECRET, child + "x")
    with pytest.raises(WebhookUnauthorized):
        await receive_platform_webhook(
            sqlite_engine, temporal, SECRET, hook(child, Body(payload()), token=other)
        )


@pytest.fixture
async def api_and_child(sqlite_engine: Engine) -> AsyncIterator[tuple[Api, str, str]]:
    async with api_for(sqlite_engine, webhook_secret=SECRET) as api:
        run_id, child = started_child(sqlite_engine)
        yield api, run_id, child


async def test_the_route_answers_each_refusal_as_problem_json(
    api_and_child: tuple[Api, str, str],
) -> None:
    api, run_id, child = api_and_child
    good = {WEBHOOK_TOKEN_HEADER: derive_webhook_token(SECRET, child)}
    cases = [
        (child, {}, payload(), 401),
        ("nope.0", {WEBHOOK_TOKEN_HEADER: derive_webhook_token(SECRET, "nope.0")}, payload(), 404),
        (child, good, b"{not json", 400),
        (child, good, b"{" + b" " * MAX_WEBHOOK_BYTES + b"}", 413),
        (child, good, payload("someOtherRun"), 409),
    ]
    for target, headers, content, status in cases:
        response = await api.client.post(
            "/webhooks/platform", params={"child": target}, content=content, headers=headers
        )
        assert response.status_code == status, response.text
        assert response.headers["content-type"].startswith("application/problem+json")
        assert response.json()["status"] == status
        # Not an API-key challenge: the webhook has its own token.
        assert "www-authenticate" not in response.headers
    assert webhook_events(api.engine, run_id) == [] and api.temporal.signalled == []
    accepted = await api.client.post(
        "/webhooks/platform",
        params={"child": child},
        content=payload(),
        headers=good | {"X-Apify-Webhook-Dispatch-Id": "d9"},
    )
    assert accepted.status_code == 202 and accepted.json() == {"accepted": True}
    assert [e.data["dispatchId"] for e in webhook_events(api.engine, run_id) if e.data] == ["d9"]
    assert api.temporal.signalled == [(poller_workflow_id(child), "platform_signal")]
