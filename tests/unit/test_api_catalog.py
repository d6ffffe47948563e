"""The actor catalog over HTTP: GET /actors for any key, /admin/actors for admin keys, the
version path (edit → version → history → a request records it), and a new actor usable at
once by POST /runs."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import Engine

from orchestrator.db.queries import runs as run_queries
from tests.unit.api_harness import Api, api_for

PLATFORM_ONLY: dict[str, Any] = {
    "platformActorId": "someone~maps-scraper",
    "description": "Places from a map search (lives only on the platform).",
    "capabilities": ["places"],
    "inputSchema": {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1},
            "limit": {"type": "integer", "minimum": 1},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    "outputFields": [{"name": "title", "type": "string"}, {"name": "domain", "type": "string"}],
    "defaults": {"memoryMb": 512},
    "caps": {"maxItems": 500},
}


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[Api]:
    async with api_for(engine) as a:
        yield a


def problem(response: Any, status: int, code: str, field: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["code"] == code
    if field is not None:
        assert body["field"] == field, body
    return body


def fresh_name() -> str:
    return f"x-maps-{secrets.token_hex(3)}"


async def test_any_key_lists_the_catalog_with_its_version(api: Api) -> None:
    ws_key, _ = api.workspace_key(f"ws_cat{secrets.token_hex(3)}")
    for key in (ws_key, api.admin_key):
        listed = await api.client.get("/actors", headers=api.auth(key))
        assert listed.status_code == 200, listed.text
        body = listed.json()
        assert isinstance(body["version"], int) and body["version"] >= 3
        by_name = {a["name"]: a for a in body["actors"]}
        leadgen = by_name["ultron-leadgen"]
        # The whole entry is listed (any field added to the entry later shows up too).
        assert {
            "platformActorId",
            "description",
            "capabilities",
            "inputSchema",
            "outputFields",
            "defaults",
            "caps",
            "version",
        } <= set(leadgen)
        assert leadgen["capabilities"] == ["leads"]
        assert leadgen["caps"]["maxItems"] == 10000
        assert 0 < leadgen["version"] <= body["version"]
        one = await api.client.get("/actors/ultron-similarweb-bulk", headers=api.auth(key))
        assert one.status_code == 200
        assert one.json() == by_name["ultron-similarweb-bulk"]
        assert one.headers["etag"] == f'"{one.json()["version"]}"'
    problem(await api.client.get("/actors"), 401, "unauthorized")
    problem(
        await api.client.get("/actors/nope", headers=api.auth(ws_key)), 404, "not-found", "name"
    )


async def test_admin_routes_refuse_a_workspace_key(api: Api) -> None:
    ws_key, _ = api.workspace_key(f"ws_cat{secrets.token_hex(3)}")
    headers = api.auth(ws_key)
    c = api.client
    problem(await c.put("/admin/actors/x-a", json=PLATFORM_ONLY, headers=headers), 403, "forbidden")
    problem(await c.delete("/admin/actors/ultron-leadgen", headers=headers), 403, "forbidden")
    problem(await c.get("/admin/actors/ultron-leadgen/history", headers=headers), 403, "forbidden")
    problem(await c.put("/admin/actors/x-a", json=PLATFORM_ONLY), 401, "unauthorized")
    listed = await c.get("/actors", headers=headers)
    assert "x-a" not in {a["name"] for a in listed.json()["actors"]}


async def test_the_version_path_put_history_and_a_request_that_records_it(api: Api) -> None:
    admin = api.auth(api.admin_key)
    c, name = api.client, fresh_name()
    before = (await c.get("/actors", headers=admin)).json()["version"]

    created = await c.put(f"/admin/actors/{name}", json=PLATFORM_ONLY, headers=admin)
    assert created.status_code == 201, created.text
    assert created.json()["version"] == before + 1 and created.headers["etag"] == f'"{before + 1}"'
    assert created.json()["inputSchema"] == PLATFORM_ONLY["inputSchema"]
    again = await c.put(f"/admin/actors/{name}", json=PLATFORM_ONLY, headers=admin)
    assert again.status_code == 200 and again.json()["version"] == before + 1  # no change

    changed = {**PLATFORM_ONLY, "description": "Places, now with websites."}
    stale = await c.put(
        f"/admin/actors/{name}", json=changed, headers={**admin, "If-Match": f'"{before}"'}
    )
    problem(stale, 412, "precondition-failed", "If-Match")
    replaced = await c.put(
        f"/admin/actors/{name}", json=changed, headers={**admin, "If-Match": f'"{before + 1}"'}
    )
    assert replaced.status_code == 200 and replaced.json()["version"] == before + 2
    assert (await c.get("/actors", headers=admin)).json()["version"] == before + 2

    history = await c.get(f"/admin/actors/{name}/history", headers=admin)
    assert history.status_code == 200
    changes = history.json()["changes"]
    assert [(ch["version"], ch["change"]) for ch in changes] == [
        (before + 1, "created"),
        (before + 2, "replaced"),
    ]
    assert changes[1]["entry"]["description"] == "Places, now with websites."
    assert changes[0]["changedBy"].startswith("key:") and api.admin_key not in str(changes)

    run = await c.post(
        "/runs",
        json={"workspaceId": "ws_cat", "runs": [{"actor": name, "input": {"query": "cafes"}}]},
        headers=admin,
    )
    assert run.status_code == 202, run.text
    shown = (await c.get(run.json()["statusUrl"], headers=admin)).json()
    assert shown["catalogVersion"] == before + 2

    deleted = await c.delete(f"/admin/actors/{name}", headers=admin)
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["change"] == "deleted" and deleted.json()["entry"] is None
    assert deleted.json()["version"] == before + 3
    problem(await c.get(f"/actors/{name}", headers=admin), 404, "not-found")
    problem(await c.delete(f"/admin/actors/{name}", headers=admin), 404, "not-found")
    gone = await c.post(
        "/runs",
        json={"workspaceId": "ws_cat", "runs": [{"actor": name, "input": {"query": "cafes"}}]},
        headers=admin,
    )
    problem(gone, 400, "unknown-actor", "/runs/0/actor")
    # The history keeps the deletion; the earlier request keeps the version it was made with.
    history = await c.get(f"/admin/actors/{name}/history", headers=admin)
    assert [ch["change"] for ch in history.json()["changes"]][-1] == "deleted"
    assert (await c.get(run.json()["statusUrl"], headers=admin)).json()["catalogVersion"] == (
        before + 2
    )
    problem(await c.get("/admin/actors/x-never/history", headers=admin), 404, "not-found", "name")


async def test_an_actor_added_through_the_api_is_usable_at_once(api: Api) -> None:
    admin = api.auth(api.admin_key)
    c, name = api.client, fresh_name()
    assert (
        await c.put(f"/admin/actors/{name}", json=PLATFORM_ONLY, headers=admin)
    ).status_code == 201

    def request(run_input: dict[str, Any]) -> dict[str, Any]:
        return {"workspaceId": "ws_cat", "runs": [{"actor": name, "input": run_input}]}

    # Its input is validated against its schema: nothing is stored, nothing spawned.
    bad_inputs: list[tuple[dict[str, Any], str]] = [
        ({}, "/runs/0/input"),
        ({"query": ""}, "/runs/0/input/query"),
        ({"query": "cafes", "limit": 0}, "/runs/0/input/limit"),
        ({"query": "cafes", "extra": 1}, "/runs/0/input"),
    ]
    for bad, field in bad_inputs:
        refused = await c.post("/runs", json=request(bad), headers=admin)
        body = problem(refused, 422, "validation-failed", field)
        assert body["detail"].startswith(field + ": ")
    assert api.counts() == (0, 0) and api.temporal.started == []

    accepted = await c.post("/runs", json=request({"query": "cafes", "limit": 5}), headers=admin)
    assert accepted.status_code == 202, accepted.text
    with api.engine.connect() as conn:
        (child,) = run_queries.get_children(conn, accepted.json()["runId"])
    # Its platformActorId is what the run starts, with its defaults and caps.
    assert child.platform_actor_id == "someone~maps-scraper"
    assert child.options == {"memoryMb": 512, "maxItems": 500}
    assert len(api.temporal.started) == 1


async def test_a_bad_entry_is_a_422_naming_the_field_and_stores_nothing(api: Api) -> None:
    admin = api.auth(api.admin_key)
    c, name = api.client, fresh_name()
    before = (await c.get("/actors", headers=admin)).json()["version"]
    for bad, field in [
        ({**PLATFORM_ONLY, "inputSchema": {"type": "objekt"}}, "/inputSchema"),
        ({**PLATFORM_ONLY, "capabilities": ["Places"]}, "/capabilities/0"),
        ({**PLATFORM_ONLY, "outputFields": [{"name": "a", "type": "str"}]}, "/outputFields/0/type"),
        ({**PLATFORM_ONLY, "caps": {"maxItems": 0}}, "/caps/maxItems"),
        ({k: v for k, v in PLATFORM_ONLY.items() if k != "platformActorId"}, "/platformActorId"),
    ]:
        refused = await c.put(f"/admin/actors/{name}", json=bad, headers=admin)
        body = problem(refused, 422, "validation-failed", field)
        assert body["detail"]
    schema_problem = await c.put(
        f"/admin/actors/{name}",
        json={**PLATFORM_ONLY, "inputSchema": {"properties": {"q": {"type": 5}}}},
        headers=admin,
    )
    assert "/properties/q/type" in problem(schema_problem, 422, "validation-failed")["detail"]
    problem(
        await c.put("/admin/actors/bad%20name", json=PLATFORM_ONLY, headers=admin),
        422,
        "validation-failed",
        "/name",
    )
    assert (await c.get("/actors", headers=admin)).json()["version"] == before
    problem(await c.get(f"/actors/{name}", headers=admin), 404, "not-found")


async def test_a_bundled_actors_bad_input_is_a_422_before_anything_is_stored(api: Api) -> None:
    admin = api.auth(api.admin_key)
    body = {
        "workspaceId": "ws_cat",
        "runs": [
            {"actor": "ultron-similarweb-bulk", "input": {"domains": ["a.com"]}},
            {"actor": "ultron-leadgen", "input": {"brief": {"targetCount": "ten"}}},
        ],
    }
    refused = await api.client.post("/runs", json=body, headers=admin)
    detail = problem(refused, 422, "validation-failed", "/runs/1/input/brief/targetCount")["detail"]
    assert "'ten' is not of type 'number'" in detail
    assert api.counts() == (0, 0) and api.temporal.started == []
