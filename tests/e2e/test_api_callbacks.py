"""The round trip a skill makes, over real HTTP against the real stack: a workspace key,
a request with a callback, the signed callback verified with ``standardwebhooks``, rows and
events read back, isolation from another workspace, and no secret in any answer or event."""

from __future__ import annotations

import json
import secrets
from typing import Any

import httpx
import pytest
import standardwebhooks

from orchestrator.cli.devstack import DevStack
from tests.support.receiver import callback_receiver
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e


def test_skill_round_trip_with_a_signed_callback(stack: DevStack) -> None:
    base = stack.urls["api"]
    workspace = f"ws_cb_{secrets.token_hex(3)}"
    seen: list[str] = []  # every response body, to look for secrets afterwards

    def record(response: httpx.Response) -> None:
        response.read()
        seen.append(response.text)

    with httpx.Client(base_url=base, timeout=30, headers=stack.api_headers) as admin:
        issued = admin.post("/admin/keys", json={"workspaceId": workspace, "name": "skill"})
        assert issued.status_code == 201, issued.text
        key, secret = issued.json()["apiKey"], issued.json()["callbackSecret"]
        other = admin.post("/admin/keys", json={"workspaceId": workspace + "_other"}).json()

    with (
        callback_receiver() as receiver,
        httpx.Client(
            base_url=base,
            timeout=30,
            headers={"Authorization": f"Bearer {key}"},
            event_hooks={"response": [record]},
        ) as api,
    ):
        request: dict[str, Any] = {
            "skillId": "skill_run_e2e",
            "conversationId": "conv_e2e",
            "callbackWebhook": receiver.url + "?token=caller-token",
            "runs": [
                {"actor": "ultron-generator", "input": {"items": 4, "durationSecs": 1}},
                {
                    "actor": "ultron-generator",
                    "input": {"items": 1, "durationSecs": 1, "finalStatus": "FAILED",
                              "failureMessage": "Scripted failure"},
                },
            ],
        }  # fmt: skip
        idem = {"Idempotency-Key": f'"{secrets.token_hex(8)}"'}
        accepted = api.post("/runs", json=request, headers=idem)
        assert accepted.status_code == 202, accepted.text
        run_id = accepted.json()["runId"]
        replay = api.post("/runs", json=request, headers=idem)
        assert replay.json()["runId"] == run_id

        eventually(lambda: receiver.received, timeout=90, description="the callback")
        delivery = receiver.received[0]
        payload = standardwebhooks.Webhook(secret).verify(delivery.body, delivery.headers)
        data = payload["data"]
        assert payload["type"] == "scrape.run.finished"
        assert (data["runId"], data["workspaceId"], data["state"]) == (run_id, workspace, "partial")
        assert (data["skillId"], data["conversationId"]) == ("skill_run_e2e", "conv_e2e")
        outcomes = [
            (c["state"], c["itemCount"], c["partial"], c["failureReason"]) for c in data["children"]
        ]
        # The failed run's one row is kept (keepPartialRows defaults to true).
        assert outcomes == [("succeeded", 4, False, None), ("failed", 1, True, "Scripted failure")]
        assert data["links"]["items"] == f"{base}/runs/{run_id}/items"

        items = api.get(data["links"]["items"], params={"format": "ndjson"})
        assert len(items.text.splitlines()) == 5
        events = eventually(
            lambda: (
                [
                    e
                    for e in api.get(f"/runs/{run_id}/events").json()["events"]
                    if e["kind"] == "callback.delivered"
                ]
                and api.get(f"/runs/{run_id}/events").json()["events"]
            ),
            timeout=30,
        )
        attempts = [e for e in events if e["kind"] == "callback.attempt"]
        assert attempts and attempts[0]["data"]["statusCode"] == 200
        assert len(api.get("/runs").json()["runs"]) == 1

    with httpx.Client(base_url=base, timeout=30) as anonymous:
        outsider = {"Authorization": f"Bearer {other['apiKey']}"}
        assert anonymous.get(f"/runs/{run_id}", headers=outsider).status_code == 404
        assert anonymous.get(f"/runs/{run_id}").status_code == 401

    everything = "\n".join(seen) + json.dumps(events)
    for leaked in (key, secret, "caller-token", stack.api_key):
        assert leaked not in everything
    log_text = "".join(stack.log_path(n).read_text() for n in ("api", "worker"))
    for leaked in (key, secret, "caller-token"):
        assert leaked not in log_text
