"""Item paging (cursor stable while ingestion continues; JSON, NDJSON, CSV) and the
OpenAPI document, in process."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy import Engine

from orchestrator.api.item_formats import csv_cell
from orchestrator.api.schemas import CreateKeyRequest, CreateRunRequest, ItemPage, Problem
from orchestrator.db.queries import items as item_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.domain.ids import child_id
from orchestrator.domain.lifecycle import ChildState
from tests.unit.api_harness import Api, api_for


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[Api]:
    async with api_for(engine) as a:
        yield a


def ingest(engine: Engine, run_id: str, idx: int, start: int, count: int) -> None:
    with engine.begin() as conn:
        run = run_queries.get_run(conn, run_id)
        child = run_queries.get_child(conn, child_id(run_id, idx))
        assert run is not None and child is not None
        rows = [
            json.dumps({"n": start + i, "tag": f"c{idx}", "nested": {"a": [1]}}).encode()
            for i in range(count)
        ]
        item_queries.write_page(conn, run, child, start, rows)


def finish(engine: Engine, run_id: str, children: int) -> None:
    with engine.begin() as conn:
        for idx in range(children):
            for state in (ChildState.RUNNING, ChildState.INGESTING, ChildState.SUCCEEDED):
                run_queries.transition_child(conn, child_id(run_id, idx), state)


async def pages(
    api: Api, run_id: str, headers: dict[str, str], **params: Any
) -> AsyncIterator[dict[str, Any]]:
    cursor = None
    while True:
        query = dict(params)
        if cursor:
            query["cursor"] = cursor
        page = (await api.client.get(f"/runs/{run_id}/items", params=query, headers=headers)).json()
        yield page
        cursor = page["nextCursor"]
        if cursor is None:
            return


async def test_item_cursor_never_skips_or_repeats_while_ingestion_continues(api: Api) -> None:
    headers = api.auth(api.admin_key)
    request = {
        "workspaceId": "ws_items",
        "skillId": "sk",
        "conversationId": "cv",
        "runs": [{"actor": "ultron-leadgen"}, {"actor": "ultron-similarweb-bulk"}],
    }
    run_id = (await api.client.post("/runs", json=request, headers=headers)).json()["runId"]
    ingest(api.engine, run_id, 0, 0, 5)
    ingest(api.engine, run_id, 1, 0, 2)
    seen: list[tuple[str, int]] = []
    n = 0
    async for page in pages(api, run_id, headers, limit=3):
        seen += [(i["childId"], i["itemIndex"]) for i in page["items"]]
        n += 1
        # Both children keep ingesting while the caller pages; then the request ends.
        if n == 1:
            ingest(api.engine, run_id, 0, 5, 4)
        elif n == 2:
            ingest(api.engine, run_id, 1, 2, 3)
        elif n == 5:
            finish(api.engine, run_id, 2)
        assert n < 20
    expected = [(child_id(run_id, 0), i) for i in range(9)] + [
        (child_id(run_id, 1), i) for i in range(5)
    ]
    assert sorted(seen) == sorted(expected) and len(seen) == len(set(seen)) == 14

    first = (
        await api.client.get(f"/runs/{run_id}/items", params={"limit": 1}, headers=headers)
    ).json()
    item = first["items"][0]
    assert item["workspaceId"] == "ws_items" and item["skillId"] == "sk"
    assert item["conversationId"] == "cv" and item["runId"] == run_id
    assert item["actor"] == "ultron-leadgen" and item["data"]["n"] == 0

    by_child = [
        i
        for p in [p async for p in pages(api, run_id, headers, childId=child_id(run_id, 1))]
        for i in p["items"]
    ]
    assert [i["itemIndex"] for i in by_child] == list(range(5))
    by_actor = [
        i
        for p in [p async for p in pages(api, run_id, headers, actor="ultron-leadgen", limit=4)]
        for i in p["items"]
    ]
    assert len(by_actor) == 9 and {i["actor"] for i in by_actor} == {"ultron-leadgen"}

    ndjson = await api.client.get(
        f"/runs/{run_id}/items", params={"format": "ndjson", "limit": 10}, headers=headers
    )
    assert ndjson.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in ndjson.text.splitlines()]
    assert len(lines) == 10 and ndjson.headers["x-next-cursor"]
    assert 'rel="next"' in ndjson.headers["link"]
    rest = await api.client.get(
        f"/runs/{run_id}/items",
        params={"cursor": ndjson.headers["x-next-cursor"], "limit": 10},
        headers=headers | {"Accept": "application/x-ndjson"},
    )
    assert len(rest.text.splitlines()) == 4 and "x-next-cursor" not in rest.headers

    csv_response = await api.client.get(
        f"/runs/{run_id}/items", params={"format": "csv", "limit": 100}, headers=headers
    )
    assert csv_response.headers["content-type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(csv_response.text)))
    assert len(table) == 14
    assert table[0]["data.n"] == "0" and table[0]["data.nested"] == '{"a":[1]}'
    assert table[0]["workspaceId"] == "ws_items" and table[0]["childId"] == child_id(run_id, 0)


async def test_openapi_states_what_the_app_validates(engine: Engine) -> None:
    async with api_for(engine, max_runs_per_request=7, max_input_bytes=999) as api:
        document = (await api.client.get("/openapi.json")).json()
    schemas = document["components"]["schemas"]
    assert schemas["CreateRunRequest"]["properties"]["runs"]["maxItems"] == 7
    assert schemas["ActorRunRequest"]["properties"]["input"]["x-max-bytes"] == 999
    assert document["info"]["x-limits"]["maxRunsPerRequest"] == 7
    assert document["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            secured = operation.get("security") == [{"ApiKey": []}]
            assert secured == (path not in ("/healthz", "/webhooks/platform")), (method, path)
            for status, response in operation["responses"].items():
                # /healthz answers 503 with its own health body, not a problem.
                if int(status) >= 400 and path != "/healthz":
                    assert list(response["content"]) == ["application/problem+json"], (path, status)
            if secured:
                assert "401" in operation["responses"], (method, path)
    post_runs = document["paths"]["/runs"]["post"]
    assert any(p["name"] == "Idempotency-Key" for p in post_runs["parameters"])
    items = document["paths"]["/runs/{run_id}/items"]["get"]["responses"]["200"]["content"]
    assert {"application/json", "application/x-ndjson", "text/csv"} <= set(items)
    # Every example in the document is valid for the model it illustrates.
    models: list[tuple[str, type[BaseModel]]] = [
        ("CreateRunRequest", CreateRunRequest),
        ("ItemPage", ItemPage),
        ("Problem", Problem),
        ("CreateKeyRequest", CreateKeyRequest),
    ]
    for name, model in models:
        examples = schemas[name]["examples"]
        assert examples
        for example in examples:
            model.model_validate(example)


def test_csv_cells_never_start_a_formula() -> None:
    assert csv_cell('=HYPERLINK("http://evil")') == '\'=HYPERLINK("http://evil")'
    assert [csv_cell(v) for v in ("+1", "-2", "@SUM(A1)", "\tx")] == [
        "'+1",
        "'-2",
        "'@SUM(A1)",
        "'\tx",
    ]
    assert csv_cell(-2) == "-2" and csv_cell(1.5) == "1.5" and csv_cell(True) == "true"
    assert csv_cell("plain text") == "plain text" and csv_cell(None) == ""
    assert csv_cell({"a": 1}) == '{"a":1}'
