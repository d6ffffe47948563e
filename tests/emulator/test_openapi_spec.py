"""Check the emulator against the official OpenAPI spec (shared/reference/apify-openapi.json).

Every Apify route the emulator serves must exist in the spec (with /v2/acts as an alias of
/v2/actors), and real answers must satisfy the spec's response schemas. The schema check is
a small hand-rolled subset of JSON Schema (type, required, properties, items, allOf, anyOf,
oneOf, enum, date-time), enough to catch missing or mistyped fields without new dependencies.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import httpx
from starlette.routing import Route

from tests.support.waiting import eventually_async

from .conftest import TOKEN, RunningEmulator

SPEC_PATH = Path(__file__).parents[2].parent / "shared/reference/apify-openapi.json"
TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "null": type(None),
}


@cache
def spec() -> dict[str, Any]:
    # The reference ships beside the project (../shared); without it this suite proves nothing.
    assert SPEC_PATH.exists(), f"OpenAPI spec not found at {SPEC_PATH}"
    data: dict[str, Any] = json.loads(SPEC_PATH.read_text())
    return data


def resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        node: Any = spec()
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = {**node, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def _is_type(value: Any, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, TYPES[name])  # type: ignore[arg-type]


def errors(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    schema = resolve(schema)
    found: list[str] = []
    for sub in schema.get("allOf", []):
        found += errors(value, sub, where)
    for key in ("anyOf", "oneOf"):
        if key in schema and all(errors(value, s, where) for s in schema[key]):
            found.append(f"{where}: matches none of {key}")
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_is_type(value, n) for n in names):
            return [*found, f"{where}: {type(value).__name__} is not {names}"]
    if "enum" in schema and value not in schema["enum"] and value is not None:
        found.append(f"{where}: {value!r} not in enum")
    if isinstance(value, str) and schema.get("format") == "date-time":
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            found.append(f"{where}: {value!r} is not a date-time")
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                found.append(f"{where}: missing required '{name}'")
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                found += errors(value[name], sub, f"{where}.{name}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value[:20]):
            found += errors(item, schema["items"], f"{where}[{i}]")
    return found


def response_schema(method: str, path: str, status: int) -> dict[str, Any]:
    responses = spec()["paths"][path][method.lower()]["responses"]
    response = resolve(responses[str(status)])
    content = response["content"]
    return dict(content.get("application/json", next(iter(content.values())))["schema"])


def check(response: httpx.Response, method: str, path: str) -> Any:
    body = response.json()
    problems = errors(body, response_schema(method, path, response.status_code))
    assert not problems, f"{method} {path} -> {response.status_code}: {problems}"
    if response.status_code >= 400:
        # Error types must be real Apify error types.
        assert not errors(body["error"]["type"], {"$ref": "#/components/schemas/ErrorType"})
    return body


def test_every_served_route_is_in_the_spec(server: RunningEmulator) -> None:
    paths = spec()["paths"]
    served = [r for r in server.app.routes if isinstance(r, Route) and r.path.startswith("/v2")]
    assert len(served) > 20
    for route in served:
        canonical = route.path.replace("/v2/acts/", "/v2/actors/", 1)
        assert canonical in paths, f"{route.path} is not in the OpenAPI spec"
        for method in route.methods or ():
            ops = paths[canonical]
            # Starlette adds HEAD to every GET route; HTTP allows HEAD wherever GET is.
            ok = method.lower() in ops or (method == "HEAD" and "get" in ops)
            assert ok, f"{method} {route.path} is not in the OpenAPI spec"


async def test_responses_match_spec_schemas(server: RunningEmulator) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=server.url, headers=auth, timeout=30) as http:
        hooks = base64.b64encode(
            json.dumps(
                [{"eventTypes": ["ACTOR.RUN.SUCCEEDED"], "requestUrl": "http://127.0.0.1:9/x"}]
            ).encode()
        ).decode()
        started = await http.post(
            "/v2/actors/ultron~generator/runs",
            params={"memory": 256, "webhooks": hooks, "unknownParam": "ignored"},
            json={"items": 12, "hiddenFields": True},
        )
        assert started.status_code == 201 and started.headers["location"].endswith(
            started.json()["data"]["id"]
        )
        run = check(started, "POST", "/v2/actors/{actorId}/runs")["data"]
        run_id, dataset_id = run["id"], run["defaultDatasetId"]
        got = await http.get(f"/v2/actor-runs/{run_id}", params={"waitForFinish": 30})
        assert check(got, "GET", "/v2/actor-runs/{runId}")["data"]["status"] == "SUCCEEDED"
        check(await http.get("/v2/actor-runs", params={"desc": 1}), "GET", "/v2/actor-runs")
        check(
            await http.get("/v2/acts/ultron~generator/runs", params={"status": "SUCCEEDED"}),
            "GET",
            "/v2/actors/{actorId}/runs",
        )
        check(await http.get("/v2/actors/ultron~generator"), "GET", "/v2/actors/{actorId}")
        check(await http.get(f"/v2/datasets/{dataset_id}"), "GET", "/v2/datasets/{datasetId}")
        check(await http.get("/v2/users/me/limits"), "GET", "/v2/users/me/limits")
        check(
            await http.post(f"/v2/actor-runs/{run_id}/abort"),
            "POST",
            "/v2/actor-runs/{runId}/abort",
        )
        items = await http.get(f"/v2/datasets/{dataset_id}/items", params={"limit": 5})
        check(items, "GET", "/v2/datasets/{datasetId}/items")
        for header in ("Offset", "Limit", "Count", "Total", "Desc"):
            assert f"x-apify-pagination-{header.lower()}" in items.headers

        # The webhook above targets a closed port, so its dispatch exists (and keeps retrying).
        emulator = server.emulator
        await eventually_async(
            lambda: any(
                d["eventData"]["actorRunId"] == run_id for d in emulator.store.dispatches.values()
            )
        )
        body = check(await http.get("/v2/webhook-dispatches"), "GET", "/v2/webhook-dispatches")
        one = await http.get(f"/v2/webhook-dispatches/{body['data']['items'][0]['id']}")
        check(one, "GET", "/v2/webhook-dispatches/{dispatchId}")

        # Error envelopes.
        missing = await http.get("/v2/actor-runs/aBcDeFgHiJkLmNoPq")
        assert missing.status_code == 404
        assert check(missing, "GET", "/v2/actor-runs/{runId}")["error"] == {
            "type": "record-not-found",
            "message": "Actor run was not found",
        }
        no_token = await http.post(
            "/v2/actors/ultron~generator/runs", headers={"Authorization": ""}, json={}
        )
        assert no_token.status_code == 401
        check(no_token, "POST", "/v2/actors/{actorId}/runs")
        bad_memory = await http.post(
            "/v2/actors/ultron~generator/runs", params={"memory": 1000}, json={}
        )
        assert bad_memory.status_code == 400
        check(bad_memory, "POST", "/v2/actors/{actorId}/runs")
        no_actor = await http.post("/v2/actors/ultron~nope/runs", json={})
        assert no_actor.status_code == 404
        check(no_actor, "POST", "/v2/actors/{actorId}/runs")


def test_schema_checker_catches_missing_fields() -> None:
    run_schema = {"$ref": "#/components/schemas/Run"}
    good = {
        "id": "a",
        "actId": "b",
        "userId": "c",
        "startedAt": "2024-01-01T00:00:00.000Z",
        "status": "READY",
        "meta": {"origin": "API"},
        "stats": {},
        "options": {"build": "latest", "timeoutSecs": 1, "memoryMbytes": 128, "diskMbytes": 256},
        "buildId": "d",
        "defaultKeyValueStoreId": "e",
        "defaultDatasetId": "f",
        "defaultRequestQueueId": "g",
        "generalAccess": "RESTRICTED",
    }
    assert errors(good, run_schema) == []
    broken = {k: v for k, v in good.items() if k != "defaultDatasetId"}
    assert errors(broken, run_schema) == ["$: missing required 'defaultDatasetId'"]
    assert errors({**good, "startedAt": 5}, run_schema)
