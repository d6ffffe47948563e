"""The API's security surface, in process: keys, workspace isolation, idempotency, limits,
callback URL checks and problem+json errors. Temporal is a recording fake."""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import pytest
from sqlalchemy import Engine, select, text
from temporalio.client import Client

from orchestrator.api.schemas import CreateRunRequest
from orchestrator.db.schema import api_keys, metadata
from orchestrator.domain.ids import orchestrator_workflow_id
from orchestrator.service.submission import submit
from tests.unit.api_harness import Api, api_for

RUN = {"actor": "ultron-leadgen", "input": {"brief": "b"}}


def body(workspace: str | None = "ws_a", **extra: Any) -> dict[str, Any]:
    document: dict[str, Any] = {"runs": [RUN], **extra}
    if workspace is not None:
        document["workspaceId"] = workspace
    return document


@pytest.fixture
async def api(sqlite_engine: Engine) -> AsyncIterator[Api]:
    async with api_for(sqlite_engine) as a:
        yield a


@pytest.fixture
async def api_any_db(engine: Engine) -> AsyncIterator[Api]:
    async with api_for(engine) as a:
        yield a


def assert_problem(response: httpx.Response, status: int, code: str, field: str | None = None):  # type: ignore[no-untyped-def]
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["code"] == code
    assert problem["status"] == status
    if field is not None:
        assert problem["field"] == field
    return problem


async def test_every_endpoint_but_health_and_platform_webhook_needs_a_key(api: Api) -> None:
    c = api.client
    calls = [
        ("POST", "/runs", body()),
        ("GET", "/runs", None),
        ("GET", "/runs/run_x", None),
        ("GET", "/runs/run_x/items", None),
        ("GET", "/runs/run_x/events", None),
        ("POST", "/runs/run_x/abort", None),
        ("POST", "/admin/keys", {"workspaceId": "ws_a"}),
        ("GET", "/admin/keys", None),
        ("DELETE", "/admin/keys/abc", None),
        ("POST", "/workspaces/ws_a/callback-secret", None),
        ("GET", "/workspaces/ws_a/usage?from=2026-01-01&to=2026-01-02", None),
    ]
    bad_keys: list[dict[str, str]] = [
        {},
        {"Authorization": "Bearer nope"},
        {"Authorization": f"Basic {api.admin_key}"},
        # Right shape, wrong checksum (last character changed).
        {"Authorization": f"Bearer {api.admin_key[:-1]}{'A' if api.admin_key[-1] != 'A' else 'B'}"},
    ]
    for headers in bad_keys:
        for method, path, payload in calls:
            response = await c.request(method, path, json=payload, headers=headers)
            assert_problem(response, 401, "unauthorized")
            assert response.headers["www-authenticate"].startswith("Bearer")
    assert (await c.get("/healthz")).status_code == 200
    # The platform webhook authenticates with its own token, not an API key.
    response = await c.post("/webhooks/platform?child=x", json={})
    assert_problem(response, 401, "unauthorized")
    assert api.counts() == (0, 0)


async def test_a_workspace_key_sees_nothing_of_another_workspace(api_any_db: Api) -> None:
    api = api_any_db
    c = api.client
    ws_a, ws_b = f"ws_a{secrets.token_hex(4)}", f"ws_b{secrets.token_hex(4)}"
    key_a, secret_a = api.workspace_key(ws_a)
    key_b, _ = api.workspace_key(ws_b)
    assert secret_a is not None and secret_a.startswith("whsec_")
    a, b = api.auth(key_a), api.auth(key_b)

    # A workspace key may omit workspaceId; naming its own is fine too.
    created = await c.post("/runs", json=body(None, skillId="s1"), headers=a)
    assert created.status_code == 202, created.text
    run_id = created.json()["runId"]
    assert (await c.post("/runs", json=body(ws_b), headers=b)).status_code == 202

    missing = (await c.get("/runs/run_missing", headers=b)).json()
    for method, path in [
        ("GET", f"/runs/{run_id}"),
        ("GET", f"/runs/{run_id}/items"),
        ("GET", f"/runs/{run_id}/items?format=csv"),
        ("GET", f"/runs/{run_id}/events"),
        ("POST", f"/runs/{run_id}/abort"),
    ]:
        response = await c.request(method, path, headers=b)
        problem = assert_problem(response, 404, "not-found", "runId")
        # Exactly what a run that does not exist looks like.
        assert problem["detail"].replace(run_id, "run_missing") == missing["detail"]
    assert api.temporal.cancelled == []

    listed = (await c.get("/runs", headers=b)).json()["runs"]
    assert {r["workspaceId"] for r in listed} == {ws_b}
    assert (await c.get("/runs", params={"workspaceId": ws_a}, headers=b)).json()["runs"] == []
    # Creating in, or rotating the secret of, another workspace: 404 as well.
    assert_problem(
        await c.post("/runs", json=body(ws_a), headers=b), 404, "not-found", "/workspaceId"
    )
    assert_problem(await c.post(f"/workspaces/{ws_a}/callback-secret", headers=b), 404, "not-found")
    # Admin endpoints are not for workspace keys.
    assert_problem(await c.get("/admin/keys", headers=a), 403, "forbidden")

    # The owner and an admin see it; the admin sees every workspace.
    assert (await c.get(f"/runs/{run_id}", headers=a)).json()["skillId"] == "s1"
    admin = api.auth(api.admin_key)
    assert (await c.get(f"/runs/{run_id}/events", headers=admin)).status_code == 200
    everything = (await c.get("/runs", headers=admin, params={"limit": 500})).json()["runs"]
    assert {ws_a, ws_b} <= {r["workspaceId"] for r in everything}
    only_a = (await c.get("/runs", params={"workspaceId": ws_a}, headers=admin)).json()
    assert [r["id"] for r in only_a["runs"]] == [run_id]
    aborted = await c.post(f"/runs/{run_id}/abort", headers=a)
    assert aborted.status_code == 202
    assert api.counts() == (2, 2)


async def test_admin_key_must_name_the_workspace(api: Api) -> None:
    response = await api.client.post("/runs", json=body(None), headers=api.auth(api.admin_key))
    assert_problem(response, 422, "workspace-required", "/workspaceId")


async def test_revoked_keys_stop_working_and_keys_are_stored_hashed(api: Api) -> None:
    c, admin = api.client, api.auth(api.admin_key)
    created = await c.post(
        "/admin/keys", json={"workspaceId": "ws_new", "name": "bot"}, headers=admin
    )
    assert created.status_code == 201
    assert created.headers["cache-control"] == "no-store"
    issued = created.json()
    key, secret = issued["apiKey"], issued["callbackSecret"]
    assert key.startswith("ork_") and secret.startswith("whsec_")
    assert issued["workspaceId"] == "ws_new" and issued["admin"] is False
    # A second key for the same workspace does not reveal the existing secret.
    again = (await c.post("/admin/keys", json={"workspaceId": "ws_new"}, headers=admin)).json()
    assert again["callbackSecret"] is None

    assert (await c.get("/runs", headers=api.auth(key))).status_code == 200
    listing = await c.get("/admin/keys", headers=admin)
    assert key not in listing.text and secret not in listing.text
    assert issued["keyId"] in listing.text

    # Only the SHA-256 is stored: no table holds the key or the secret in clear.
    with api.engine.connect() as conn:
        row = conn.execute(select(api_keys).where(api_keys.c.id == issued["keyId"])).one()
        assert row.key_hash == hashlib.sha256(key.encode()).hexdigest()
        dump = json.dumps(
            [[list(r) for r in conn.execute(text(f"SELECT * FROM {t}"))] for t in metadata.tables],
            default=str,
        )
    assert key not in dump and key.split("_")[2] not in dump
    assert secret not in dump and api.admin_key not in dump

    revoked = await c.delete(f"/admin/keys/{issued['keyId']}", headers=admin)
    assert revoked.status_code == 200 and revoked.json()["revokedAt"]
    assert_problem(await c.get("/runs", headers=api.auth(key)), 401, "unauthorized")
    assert (await c.delete(f"/admin/keys/{issued['keyId']}", headers=admin)).status_code == 200
    assert_problem(await c.delete("/admin/keys/nokey", headers=admin), 404, "not-found")

    rotated = await c.post("/workspaces/ws_new/callback-secret", headers=api.auth(again["apiKey"]))
    assert rotated.status_code == 200 and rotated.headers["cache-control"] == "no-store"
    new_secret = rotated.json()["callbackSecret"]
    assert new_secret.startswith("whsec_") and new_secret != secret
    assert rotated.json()["previousValidUntil"] is not None


async def test_idempotency_key_replays_or_conflicts(api_any_db: Api) -> None:
    api = api_any_db
    ws_a, ws_b = f"ws_a{secrets.token_hex(4)}", f"ws_b{secrets.token_hex(4)}"
    c, headers = api.client, api.auth(api.workspace_key(ws_a)[0])
    key = {"Idempotency-Key": '"8e03978e-40d5-43e8-bc93-6894a57f9324"'}
    first = await c.post("/runs", json=body(ws_a), headers=headers | key)
    assert first.status_code == 202 and "idempotent-replayed" not in first.headers
    # Same request (defaults spelled out, bare-token header): the original answer.
    same = body(ws_a, runs=[{**RUN, "options": {}}])
    again = await c.post(
        "/runs", json=same, headers=headers | {"Idempotency-Key": key["Idempotency-Key"][1:-1]}
    )
    assert again.status_code == 202
    assert again.json()["runId"] == first.json()["runId"]
    assert again.headers["idempotent-replayed"] == "true"
    assert len(api.temporal.started) == 1 and api.counts() == (1, 1)

    different = await c.post("/runs", json=body(ws_a, skillId="other"), headers=headers | key)
    assert_problem(different, 422, "idempotency-key-reused", "Idempotency-Key")
    assert len(api.temporal.started) == 1 and api.counts() == (1, 1)

    # Keys are per workspace: another workspace may use the same key.
    other = api.auth(api.workspace_key(ws_b)[0])
    assert (await c.post("/runs", json=body(ws_b), headers=other | key)).status_code == 202
    bad = await c.post("/runs", json=body(ws_a), headers=headers | {"Idempotency-Key": '""'})
    assert_problem(bad, 400, "invalid-idempotency-key", "Idempotency-Key")
    assert api.counts() == (2, 2)


async def test_a_replay_starts_the_workflow_a_cancelled_first_call_stored_but_never_started(
    api_any_db: Api,
) -> None:
    """The first call committed the request, then was cancelled (its client went away, its
    process died) before it started the workflow: the caller's retry with the same key
    starts it, once; a retry of a running request starts nothing new."""
    api = api_any_db
    command = CreateRunRequest.model_validate(body(f"ws_{secrets.token_hex(4)}")).to_command()
    task_queue = api.settings.task_queue
    temporal = cast(Client, api.temporal)
    api.temporal.fail_next_start = asyncio.CancelledError()
    with pytest.raises(asyncio.CancelledError):
        await submit(api.engine, temporal, task_queue, command, idempotency_key="k-cut")
    assert api.counts() == (1, 1) and api.temporal.started == []  # stored, not started

    again = await submit(api.engine, temporal, task_queue, command, idempotency_key="k-cut")
    assert again.replayed
    assert api.temporal.started == [orchestrator_workflow_id(again.run.id)]
    third = await submit(api.engine, temporal, task_queue, command, idempotency_key="k-cut")
    assert third.replayed and third.run.id == again.run.id
    assert api.temporal.started == [orchestrator_workflow_id(again.run.id)]
    assert api.counts() == (1, 1)


async def test_limits_reject_and_create_nothing(sqlite_engine: Engine) -> None:
    async with api_for(
        sqlite_engine, max_body_bytes=4096, max_runs_per_request=3, max_input_bytes=100
    ) as api:
        c, headers = api.client, api.auth(api.admin_key)
        big = body(runs=[{"actor": "ultron-leadgen", "input": {"x": "y" * 5000}}])
        assert_problem(await c.post("/runs", json=big, headers=headers), 413, "payload-too-large")

        async def chunks() -> AsyncIterator[bytes]:
            yield json.dumps(big).encode()[:3000]
            yield json.dumps(big).encode()[3000:]

        # No Content-Length (chunked): counted while read.
        streamed = await c.post(
            "/runs", content=chunks(), headers=headers | {"content-type": "application/json"}
        )
        assert_problem(streamed, 413, "payload-too-large")
        many = body(runs=[RUN] * 4)
        assert_problem(
            await c.post("/runs", json=many, headers=headers), 422, "too-many-runs", "/runs"
        )
        large_input = body(runs=[RUN, {"actor": "ultron-leadgen", "input": {"x": "y" * 200}}])
        assert_problem(
            await c.post("/runs", json=large_input, headers=headers),
            422,
            "input-too-large",
            "/runs/1/input",
        )
        unknown = body(runs=[RUN, {"actor": "nope"}])
        assert_problem(
            await c.post("/runs", json=unknown, headers=headers),
            400,
            "unknown-actor",
            "/runs/1/actor",
        )
        assert api.counts() == (0, 0) and api.temporal.started == []
        assert (
            await c.post("/runs", json=body(runs=[RUN] * 3), headers=headers)
        ).status_code == 202


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com/cb",
        "https://127.0.0.1/cb",
        "https://localhost/cb",
        "https://10.1.2.3/cb",
        "https://192.168.0.10/cb",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/cb",
        "https://[::ffff:127.0.0.1]/cb",
        "https://2130706433/cb",
        "https://0x7f.0.0.1/cb",
        "https://metadata.google.internal/cb",
        "https://user:secret-token@hooks.example.com/cb",
        "ftp://hooks.example.com/cb",
    ],
)
async def test_unsafe_callback_urls_are_400_naming_the_field(api: Api, url: str) -> None:
    response = await api.client.post(
        "/runs", json=body(callbackWebhook=url), headers=api.auth(api.admin_key)
    )
    problem = assert_problem(response, 400, "unsafe-callback-url", "/callbackWebhook")
    assert "secret-token" not in response.text and url not in problem["detail"]
    assert api.counts() == (0, 0)


async def test_localhost_callbacks_only_with_explicit_configuration(
    sqlite_engine: Engine,
) -> None:
    url = "http://127.0.0.1:9/cb"
    async with api_for(sqlite_engine, allow_insecure_callback_localhost=True) as api:
        ok = await api.client.post(
            "/runs", json=body(callbackWebhook=url), headers=api.auth(api.admin_key)
        )
        assert ok.status_code == 202
        # Still https-only for every other host.
        remote = await api.client.post(
            "/runs",
            json=body(callbackWebhook="http://hooks.example.com/"),
            headers=api.auth(api.admin_key),
        )
        assert_problem(remote, 400, "unsafe-callback-url", "/callbackWebhook")


async def test_list_runs_filters_and_pages_with_a_cursor(api: Api) -> None:
    c, headers = api.client, api.auth(api.workspace_key("ws_a")[0])
    ids = []
    for n in range(5):
        extra = {"skillId": f"skill_{n % 2}", "conversationId": f"conv_{n}"}
        ids.append((await c.post("/runs", json=body(**extra), headers=headers)).json()["runId"])
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = (await c.get("/runs", params=params, headers=headers)).json()
        seen += [r["id"] for r in page["runs"]]
        pages += 1
        cursor = page["nextCursor"]
        if cursor is None:
            break
        # A request created meanwhile does not shift the pages (it sorts first).
        if pages == 1:
            await c.post("/runs", json=body(), headers=headers)
    assert seen == list(reversed(ids)) and pages == 3
    skill = (await c.get("/runs", params={"skillId": "skill_1"}, headers=headers)).json()
    assert [r["id"] for r in skill["runs"]] == [ids[3], ids[1]]
    conv = (await c.get("/runs", params={"conversationId": "conv_2"}, headers=headers)).json()
    assert [r["id"] for r in conv["runs"]] == [ids[2]]
    queued = await c.get(
        "/runs", params=[("state", "queued"), ("state", "running")], headers=headers
    )
    assert len(queued.json()["runs"]) == 6
    none = await c.get("/runs", params={"state": "succeeded"}, headers=headers)
    assert none.json()["runs"] == []
    future = await c.get("/runs", params={"createdAfter": "2999-01-01T00:00:00Z"}, headers=headers)
    assert future.json()["runs"] == []
    past = await c.get("/runs", params={"createdBefore": "2999-01-01T00:00:00Z"}, headers=headers)
    assert len(past.json()["runs"]) == 6
    assert_problem(
        await c.get("/runs", params={"state": "nope"}, headers=headers),
        422,
        "validation-failed",
        "/state/0",
    )
    assert_problem(
        await c.get("/runs", params={"cursor": "!!"}, headers=headers),
        422,
        "validation-failed",
        "cursor",
    )
