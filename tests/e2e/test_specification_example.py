"""The specification's own request (DESIGN.md, "The request, as specified"), placeholders
filled in, end to end: it must succeed with rows from both actors and a signed callback.
The examples a user copies (examples/demo.json and examples/brief.json, the README, the
dashboard) use its shape."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest
import standardwebhooks

from orchestrator.cli.devstack import DevStack
from tests.support.receiver import callback_receiver
from tests.support.waiting import eventually

from .support import all_items, wait_terminal

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).parents[2]
BRIEF = {"product": "Payroll software for mid-size manufacturers", "targetCount": 20}
ICP = {
    "industries": ["Manufacturing", "Logistics"],
    "titles": ["HR Director", "CFO"],
    "regions": ["Europe"],
    "companySize": "200-1000",
}
DOMAINS = ["example.com", "example.org", "example.net"]


def specification_example(workspace: str, callback_url: str) -> dict[str, Any]:
    return {
        "workspaceId": workspace,
        "conversationId": "conv_spec_example",
        "skillId": "skill_spec_example",
        "callbackWebhook": callback_url,
        "runs": [
            {"actor": "ultron-leadgen",
             "input": {"brief": BRIEF, "icp": ICP},
             "options": {"memoryMb": 1024, "timeoutSec": 1800}},
            {"actor": "ultron-similarweb-bulk", "input": {"domains": DOMAINS}},
        ],
    }  # fmt: skip


def test_the_specifications_example_succeeds_with_rows_from_both_actors(stack: DevStack) -> None:
    workspace = f"ws_spec_{secrets.token_hex(3)}"
    with httpx.Client(base_url=stack.urls["api"], timeout=30, headers=stack.api_headers) as admin:
        issued = admin.post("/admin/keys", json={"workspaceId": workspace, "name": "spec"})
        assert issued.status_code == 201, issued.text
        key, secret = issued.json()["apiKey"], issued.json()["callbackSecret"]

    with (
        callback_receiver() as receiver,
        httpx.Client(
            base_url=stack.urls["api"], timeout=30, headers={"Authorization": f"Bearer {key}"}
        ) as api,
    ):
        accepted = api.post("/runs", json=specification_example(workspace, receiver.url))
        assert accepted.status_code == 202, accepted.text
        run_id = accepted.json()["runId"]

        run = wait_terminal(api, run_id)
        assert run["state"] == "succeeded", run
        assert [(c["actor"], c["state"]) for c in run["children"]] == [
            ("ultron-leadgen", "succeeded"),
            ("ultron-similarweb-bulk", "succeeded"),
        ]
        assert [c["itemsIngested"] for c in run["children"]] == [20, 3]

        items = all_items(api, run_id)
        leads = [i["data"] for i in items if i["actor"] == "ultron-leadgen"]
        traffic = [i["data"] for i in items if i["actor"] == "ultron-similarweb-bulk"]
        assert len(leads) == 20 and sorted(t["domain"] for t in traffic) == sorted(DOMAINS)
        # The ICP object was understood, not just carried along.
        assert {lead["industry"] for lead in leads} <= set(ICP["industries"])
        assert {lead["title"] for lead in leads} <= set(ICP["titles"])
        assert all(200 <= lead["employees"] <= 1000 for lead in leads)
        assert all(lead["brief"] == BRIEF and lead["icp"] == ICP for lead in leads)

        eventually(lambda: receiver.received, timeout=60, description="the callback")
        delivery = receiver.received[0]
        payload = standardwebhooks.Webhook(secret).verify(delivery.body, delivery.headers)
        data = payload["data"]
        assert (data["runId"], data["workspaceId"], data["state"]) == (
            run_id,
            workspace,
            "succeeded",
        )
        assert (data["skillId"], data["conversationId"]) == (
            "skill_spec_example",
            "conv_spec_example",
        )


def _json_after(text: str, marker: str, end: str) -> Any:
    start = text.index(marker) + len(marker)
    return json.loads(text[start : text.index(end, start)])


def test_the_examples_a_user_copies_use_the_specifications_shape() -> None:
    demo = json.loads((ROOT / "examples" / "demo.json").read_text())
    leadgen = demo["runs"][0]
    assert leadgen["actor"] == "ultron-leadgen"
    assert isinstance(leadgen["input"]["brief"], dict) and isinstance(leadgen["input"]["icp"], dict)

    # The README's curl body is the same request as demo.json.
    readme = (ROOT / "README.md").read_text()
    curl = re.search(
        r"curl -s -X POST http://127\.0\.0\.1:8000/runs .*?-d '(\{.*?\})'", readme, re.S
    )
    assert curl is not None
    assert json.loads(curl.group(1)) == demo


def test_the_demo_brief_is_the_dashboards_and_the_readmes() -> None:
    brief = json.loads((ROOT / "examples" / "brief.json").read_text())
    assert brief["needs"] == ["leads", "web-traffic"]
    assert isinstance(brief["brief"], dict) and isinstance(brief["icp"], dict)
    # The dashboard's demo button submits this very brief (its workspace field aside).
    script = (ROOT / "src/orchestrator/dashboard/static/app.js").read_text()
    assert _json_after(script, "const DEMO_BRIEF = ", ";\n") == brief
    # The README's walk-through plans the same brief with curl before running it.
    readme = (ROOT / "README.md").read_text()
    curl = re.search(
        r"curl -s -X POST http://127\.0\.0\.1:8000/plans .*?-d '(\{.*?\})'", readme, re.S
    )
    assert curl is not None
    assert json.loads(curl.group(1)) == brief
    assert "orchestrator submit examples/brief.json --watch" in readme
