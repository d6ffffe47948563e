"""Chained runs end to end over real HTTP (issue 12, point 3): leads, then web traffic for
the distinct domains of those leads, on the emulator; and an empty source skips."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx
import pytest

from orchestrator.cli.devstack import DevStack

from .support import all_items, event_kinds, wait_terminal

pytestmark = pytest.mark.e2e

LEADS: dict[str, Any] = {
    "actor": "ultron-leadgen",
    "input": {
        "brief": {"product": "B2B payroll software", "targetCount": 30},
        "icp": {"industries": ["Retail", "Logistics"], "regions": ["Europe"]},
    },
}
TRAFFIC: dict[str, Any] = {
    "actor": "ultron-similarweb-bulk",
    "input": {},
    "inputFrom": {"domains": {"run": 0, "field": "domain", "distinct": True, "max": 500}},
}


def test_web_traffic_for_the_domains_of_the_leads(stack: DevStack) -> None:
    body = {"workspaceId": "ws_e2e_chain", "runs": [LEADS, TRAFFIC]}
    with httpx.Client(base_url=stack.urls["api"], timeout=30, headers=stack.api_headers) as api:
        accepted = api.post("/runs", json=body)
        assert accepted.status_code == 202, accepted.text
        run_id = accepted.json()["runId"]
        run = wait_terminal(api, run_id)
        assert run["state"] == "succeeded", run
        leads, traffic = run["children"]
        assert [leads["state"], traffic["state"]] == ["succeeded", "succeeded"]
        assert leads["inputFrom"] is None
        assert traffic["inputFrom"] == {
            "domains": {"run": 0, "field": "domain", "distinct": True, "max": 500}
        }
        items = all_items(api, run_id)
        lead_domains = [i["data"]["domain"] for i in items if i["childId"] == leads["id"]]
        distinct = list(dict.fromkeys(d for d in lead_domains if d))
        assert len(lead_domains) == 30 and distinct
        assert traffic["inputBuilt"] == {"domains": len(distinct)}
        assert traffic["itemsIngested"] == len(distinct)
        looked_up = [i["data"]["domain"] for i in items if i["childId"] == traffic["id"]]
        assert sorted(looked_up) == sorted(distinct)
        assert all(
            i["actor"] == "ultron-similarweb-bulk" for i in items if i["childId"] == traffic["id"]
        )
        assert event_kinds(api, run_id)["child.input_built"] == 1
        # The traffic run started after the leads were stored.
        started = datetime.fromisoformat(traffic["startedAt"])
        assert started > datetime.fromisoformat(leads["finishedAt"])


def test_a_run_fed_by_an_empty_source_is_skipped(stack: DevStack) -> None:
    empty = {"actor": "ultron-generator", "input": {"items": 0, "durationSecs": 0}}
    chained = {**TRAFFIC, "inputFrom": {"domains": {"run": 0, "field": "domain"}}}
    body = {"workspaceId": "ws_e2e_chain", "runs": [empty, chained]}
    with httpx.Client(base_url=stack.urls["api"], timeout=30, headers=stack.api_headers) as api:
        accepted = api.post("/runs", json=body)
        assert accepted.status_code == 202, accepted.text
        run_id = accepted.json()["runId"]
        run = wait_terminal(api, run_id)
        assert run["state"] == "succeeded", run
        source, skipped = run["children"]
        assert source["state"] == "succeeded" and source["itemsIngested"] == 0
        assert skipped["state"] == "skipped" and skipped["platformRunId"] is None
        assert skipped["statusMessage"].startswith(
            "skipped: run 0 (ultron-generator) produced no `domain` values"
        )
        assert run["counts"]["skipped"] == 1
        assert event_kinds(api, run_id)["child.skipped"] == 1
