"""Capacity admission over real HTTP: a workspace limited to one run at a time shows its
other children ``queued`` with their ``queuePosition``, and every one ends succeeded."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest

from orchestrator.cli.devstack import DevStack

from .support import wait_terminal

pytestmark = pytest.mark.e2e


def _children(api: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    run = api.get(f"/runs/{run_id}")
    assert run.status_code == 200, run.text
    children: list[dict[str, Any]] = run.json()["children"]
    return children


def test_queued_children_show_their_position_and_all_succeed(stack: DevStack) -> None:
    workspace = f"ws_queue_{uuid.uuid4().hex[:8]}"
    generator = {"actor": "ultron-generator", "input": {"items": 3, "durationSecs": 15}}
    with httpx.Client(base_url=stack.urls["api"], timeout=30, headers=stack.api_headers) as api:
        limit = api.put(f"/workspaces/{workspace}/concurrency", json={"maxConcurrentRuns": 1})
        assert limit.status_code == 200, limit.text
        accepted = api.post("/runs", json={"workspaceId": workspace, "runs": [generator] * 3})
        assert accepted.status_code == 202, accepted.text
        run_id = accepted.json()["runId"]
        deadline = time.monotonic() + 60
        seen: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            seen = _children(api, run_id)
            queued = [c for c in seen if c["state"] == "queued"]
            if len(queued) == 2 and all(c.get("queuePosition") for c in queued):
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"never saw two queued children with positions: {seen}")
        assert sorted(c["queuePosition"] for c in queued) == [1, 2]
        states = [c["state"] for c in seen]
        assert states.count("running") + states.count("spawning") == 1, states
        run = wait_terminal(api, run_id, timeout=120)
        assert run["state"] == "succeeded"
        assert all(c.get("queuePosition") is None for c in run["children"])
        events = api.get(f"/runs/{run_id}/events").json()["events"]
        waits = [e for e in events if "waiting for a platform slot" in e["message"]]
        assert len(waits) == 2
        assert api.delete(f"/workspaces/{workspace}/concurrency").status_code == 200
