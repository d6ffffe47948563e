"""One request end to end over real HTTP: API → Temporal → worker → emulator → rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.cli.devstack import DevStack

from .support import all_items, wait_terminal

pytestmark = pytest.mark.e2e

DEMO = Path(__file__).parents[2] / "examples" / "demo.json"


def test_demo_request_succeeds_with_every_row(stack: DevStack) -> None:
    with httpx.Client(base_url=stack.urls["api"], timeout=30, headers=stack.api_headers) as api:
        accepted = api.post("/runs", json=json.loads(DEMO.read_text()))
        assert accepted.status_code == 202, accepted.text
        body = accepted.json()
        run_id = body["runId"]
        assert body["state"] == "queued"
        assert body["statusUrl"] == f"/runs/{run_id}"

        run = wait_terminal(api, run_id)
        assert run["state"] == "succeeded"
        assert run["finishedAt"] is not None
        assert [c["state"] for c in run["children"]] == ["succeeded", "succeeded"]
        assert [c["platformStatus"] for c in run["children"]] == ["SUCCEEDED", "SUCCEEDED"]
        assert [c["itemsIngested"] for c in run["children"]] == [25, 3]
        assert run["itemsTotal"] == 28

        items = all_items(api, run_id)
        assert len(items) == 28
        assert len({(i["childId"], i["itemIndex"]) for i in items}) == 28
        domains = [i["data"]["domain"] for i in items if i["actor"] == "ultron-similarweb-bulk"]
        assert sorted(domains) == ["example.com", "example.net", "example.org"]

        events = api.get(f"/runs/{run_id}/events").json()["events"]
        kinds = {e["kind"] for e in events}
        assert {"run.created", "child.spawn_attempt", "child.state", "run.state"} <= kinds
        states = [e["data"]["to"] for e in events if e["kind"] == "run.state"]
        assert states[-1] == "succeeded"


def test_all_failed_request_ends_failed_with_the_platform_message(stack: DevStack) -> None:
    request = {
        "workspaceId": "ws_e2e",
        "runs": [
            {
                "actor": "ultron-generator",
                "input": {
                    "items": 5,
                    "durationSecs": 1,
                    "finalStatus": "FAILED",
                    "failureMessage": "Scripted failure",
                },
            }
        ],
    }
    with httpx.Client(base_url=stack.urls["api"], timeout=30, headers=stack.api_headers) as api:
        accepted = api.post("/runs", json=request)
        assert accepted.status_code == 202, accepted.text
        run = wait_terminal(api, accepted.json()["runId"])
    assert run["state"] == "failed"
    (child,) = run["children"]
    assert child["state"] == "failed"
    assert child["platformStatus"] == "FAILED"
    assert child["statusMessage"] == "Scripted failure"


def test_unknown_actor_is_a_400_naming_it_and_nothing_is_created(stack: DevStack) -> None:
    request = {
        "workspaceId": "ws_unknown_actor",
        "runs": [{"actor": "ultron-leadgen"}, {"actor": "no-such-actor"}],
    }
    with httpx.Client(base_url=stack.urls["api"], timeout=30, headers=stack.api_headers) as api:
        response = api.post("/runs", json=request)
        assert response.status_code == 400
        assert response.headers["content-type"].startswith("application/problem+json")
        problem = response.json()
        assert problem["code"] == "unknown-actor"
        assert problem["field"] == "/runs/1/actor"
        assert "no-such-actor" in problem["detail"]
        listed = api.get("/runs", params={"workspaceId": "ws_unknown_actor"}).json()
        assert listed["runs"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"workspaceId": "", "runs": [{"actor": "ultron-leadgen"}]}, "/workspaceId"),
        ({"workspaceId": "ws", "runs": []}, "/runs"),
        ({"workspaceId": "ws", "runs": [{"actor": "ultron-leadgen", "x": 1}]}, "/runs/0/x"),
        (
            {
                "workspaceId": "ws",
                "runs": [{"actor": "ultron-leadgen", "options": {"memoryMb": 1}}],
            },
            "/runs/0/options/memoryMb",
        ),
    ],
)
def test_invalid_bodies_are_422_problems_naming_the_field(
    stack: DevStack, body: dict[str, Any], field: str
) -> None:
    response = httpx.post(
        f"{stack.urls['api']}/runs", json=body, timeout=30, headers=stack.api_headers
    )
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["field"] == field


def test_missing_run_is_a_404_problem(stack: DevStack) -> None:
    response = httpx.get(
        f"{stack.urls['api']}/runs/run_missing", timeout=30, headers=stack.api_headers
    )
    assert response.status_code == 404
    assert response.json()["code"] == "not-found"
