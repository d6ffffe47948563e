"""``deliver.rows`` through the API: stored and shown, ``callback`` without a callbackWebhook
is a 422 naming ``/deliver/rows`` with nothing written or started, unknown values refused,
and the idempotency fingerprint names the field only when rows are pushed (SQLite and
PostgreSQL)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import Engine

from orchestrator.service.commands import ActorRun, SubmitRequest
from orchestrator.service.submission import request_hash
from tests.unit.api_harness import Api, api_for

RUN = {"actor": "ultron-leadgen", "input": {"brief": "b"}}
HOOK = "https://example.com/hook"


@pytest.fixture
async def api_any_db(engine: Engine) -> AsyncIterator[Api]:
    async with api_for(engine) as a:
        yield a


async def test_callback_without_a_callback_url_is_a_422_naming_the_field(
    api_any_db: Api,
) -> None:
    api = api_any_db
    body = {"workspaceId": "ws_rows", "runs": [RUN], "deliver": {"rows": "callback"}}
    response = await api.client.post("/runs", json=body, headers=api.auth(api.admin_key))
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["field"] == "/deliver/rows"
    assert "callbackWebhook" in problem["detail"]
    assert api.counts() == (0, 0) and api.temporal.started == []


@pytest.mark.parametrize(
    "deliver", [{"rows": "email"}, {"rows": True}, {"rows": "callback", "extra": 1}, "callback"]
)
async def test_other_values_are_refused(api_any_db: Api, deliver: Any) -> None:
    api = api_any_db
    body = {"workspaceId": "ws_rows", "runs": [RUN], "callbackWebhook": HOOK, "deliver": deliver}
    response = await api.client.post("/runs", json=body, headers=api.auth(api.admin_key))
    assert response.status_code == 422, response.text
    assert response.json()["field"].startswith("/deliver")
    assert api.counts() == (0, 0)


async def test_the_choice_is_stored_and_shown(api_any_db: Api) -> None:
    api = api_any_db
    headers = api.auth(api.admin_key)
    for deliver, shown in (
        (None, "none"),
        ({"rows": "none"}, "none"),
        ({"rows": "callback"}, "callback"),
    ):
        body: dict[str, Any] = {"workspaceId": "ws_rows", "runs": [RUN], "callbackWebhook": HOOK}
        if deliver is not None:
            body["deliver"] = deliver
        response = await api.client.post("/runs", json=body, headers=headers)
        assert response.status_code == 202, response.text
        view = (await api.client.get(f"/runs/{response.json()['runId']}", headers=headers)).json()
        assert view["deliver"] == {"rows": shown}


def test_the_fingerprint_names_deliver_only_when_rows_are_pushed() -> None:
    minimal = SubmitRequest(runs=(ActorRun(actor="a"),))
    expected_minimal = "b6a317283d68d206db4d93327d987b11c850276fbf4d1aa3dad779d9421392ac"
    assert request_hash(minimal, "ws_b") == expected_minimal
    none = SubmitRequest(runs=(ActorRun(actor="a"),), deliver_rows="none")
    assert request_hash(none, "ws_b") == expected_minimal
    pushed = SubmitRequest(runs=(ActorRun(actor="a"),), deliver_rows="callback")
    assert request_hash(pushed, "ws_b") != expected_minimal
