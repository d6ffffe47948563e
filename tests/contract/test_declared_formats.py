"""The formats and answers the document declares, checked directly (fast, and each failure
names one rule; ``test_openapi_contract`` checks the same under generated input)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fastapi import APIRouter

from orchestrator.api.openapi import PROBLEMS
from orchestrator.api.params import parse_rfc3339
from orchestrator.api.routes.runs import parse_idempotency_key
from orchestrator.app import create_app
from orchestrator.config.settings import Settings
from orchestrator.platform.webhook_auth import (
    WEBHOOK_CHILD_PARAM,
    WEBHOOK_TOKEN_HEADER,
    derive_webhook_token,
)
from orchestrator.service.errors import InvalidIdempotencyKey
from tests.support.secrets import TEST_SECRETS
from tests.unit.api_harness import Api


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-31T09:30:00Z", datetime(2026, 1, 31, 9, 30, tzinfo=UTC)),
        ("2026-01-31t09:30:00.5z", datetime(2026, 1, 31, 9, 30, 0, 500_000, tzinfo=UTC)),
        ("2026-01-31T09:30:00.1234567+01:30", datetime(2026, 1, 31, 8, 0, 0, 123_456, tzinfo=UTC)),
        ("2016-12-31T23:59:60Z", datetime(2016, 12, 31, 23, 59, 59, tzinfo=UTC)),  # leap second
    ],
)
def test_rfc3339_date_times_are_accepted(text: str, expected: datetime) -> None:
    assert parse_rfc3339(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "0.5",  # a Unix timestamp to pydantic, not a date-time
        "1700000000",
        "2026-01-31",  # a date
        "2026-01-31T09:30:00",  # no offset
        "2026-01-31 09:30:00Z",
        "2026-02-30T00:00:00Z",
        "2026-01-31T09:30:00+24:00",
        "0001-01-01T00:00:00+01:00",  # before datetime.min in UTC
        "2026-01-31T09:30:00Z\n",
    ],
)
def test_other_times_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_rfc3339(text)


async def test_created_filters_refuse_what_is_not_a_date_time(api: Api) -> None:
    headers = api.auth(api.workspace_key("ws_formats")[0])
    for value in ("0.5", "2026-01-31", "2026-01-31T09:30:00"):
        answer = await api.client.get("/runs", params={"createdBefore": value}, headers=headers)
        assert answer.status_code == 422, value
        assert answer.json()["field"] == "/createdBefore"
    ok = await api.client.get("/runs", params={"createdAfter": "2026-01-31T09:30:00+02:00"})
    assert ok.status_code == 401  # well-formed; only the key is missing


@pytest.mark.parametrize("raw", ['"abc"', "abc", '"a b"', "x" * 255, '"' + "x" * 255 + '"'])
def test_idempotency_keys_of_the_declared_shape_are_accepted(raw: str) -> None:
    assert parse_idempotency_key(raw) == raw.strip('"')


@pytest.mark.parametrize("raw", ["", '""', '"abc', "x" * 256, "é", "a\tb"])
def test_other_idempotency_keys_are_refused(raw: str) -> None:
    with pytest.raises(InvalidIdempotencyKey):
        parse_idempotency_key(raw)


async def test_405_allows_every_method_the_path_serves(api: Api) -> None:
    headers = api.auth(api.admin_key)
    runs = await api.client.put("/runs", headers=headers)
    assert runs.status_code == 405
    assert runs.headers["allow"] == "GET, POST"
    assert runs.json()["code"] == "method-not-allowed"
    keys = await api.client.patch("/admin/keys", headers=headers)
    assert keys.headers["allow"] == "GET, POST"


async def test_an_undecodable_body_is_a_documented_malformed_body(api: Api) -> None:
    headers = api.auth(api.admin_key) | {"content-type": "application/json"}
    answer = await api.client.post("/admin/keys", content=b"\xff\xfe{", headers=headers)
    assert answer.status_code == 400
    assert answer.json()["code"] == "malformed-body"
    declared = PROBLEMS[("post", "/admin/keys")][400]
    assert answer.json()["code"] in declared


def test_every_operation_must_be_in_the_status_table() -> None:
    app = create_app(Settings(database_url="sqlite://", **TEST_SECRETS))
    assert app.openapi()["paths"]  # builds: every route is in the table
    extra = APIRouter()

    @extra.get("/undeclared")
    def undeclared() -> None: ...

    app = create_app(Settings(database_url="sqlite://", **TEST_SECRETS))
    app.include_router(extra)
    with pytest.raises(RuntimeError, match="GET /undeclared is missing"):
        app.openapi()


async def test_webhook_answers_are_the_declared_ones(api: Api) -> None:
    # The generated run reaches the webhook's 400 only by chance (a valid token and a bad body).
    secret = api.settings.secret("webhook_secret")
    declared = PROBLEMS[("post", "/webhooks/platform")]
    child = "run_nothere.0"
    headers = {WEBHOOK_TOKEN_HEADER: derive_webhook_token(secret, child)}
    params = {WEBHOOK_CHILD_PARAM: child}
    for body, status in ((b"not json", 400), (b"[1]", 400), (b"{}", 404)):
        answer = await api.client.post(
            "/webhooks/platform", params=params, content=body, headers=headers
        )
        assert answer.status_code == status, body
        assert answer.json()["code"] in declared[status]
    unsigned = await api.client.post("/webhooks/platform", params=params, content=b"{}")
    assert unsigned.status_code == 401 and unsigned.json()["code"] in declared[401]
