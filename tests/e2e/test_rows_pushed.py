"""Rows pushed to the callback, over real HTTP against the real stack: a 2,500-row request
with ``deliver.rows = "callback"`` delivers every row exactly once across signed NDJSON
batches (verified with the workspace's callback secret, as a receiver would), in order, and
then the summary callback, which counts the pushed batches and rows."""

from __future__ import annotations

import json
import secrets
from typing import Any

import httpx
import pytest

from orchestrator.cli.devstack import DevStack
from orchestrator.delivery.signing import verify
from tests.support.receiver import assemble_row_batches, callback_receiver, is_row_batch
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e

ROWS = 2500


def test_every_row_is_pushed_once_then_the_summary(stack: DevStack) -> None:
    base = stack.urls["api"]
    workspace = f"ws_rows_{secrets.token_hex(3)}"
    with httpx.Client(base_url=base, timeout=30, headers=stack.api_headers) as admin:
        issued = admin.post("/admin/keys", json={"workspaceId": workspace, "name": "skill"})
        assert issued.status_code == 201, issued.text
        key, secret = issued.json()["apiKey"], issued.json()["callbackSecret"]

    with (
        callback_receiver() as receiver,
        httpx.Client(base_url=base, timeout=60, headers={"Authorization": f"Bearer {key}"}) as api,
    ):
        request: dict[str, Any] = {
            "callbackWebhook": receiver.url,
            "deliver": {"rows": "callback"},
            "runs": [{"actor": "ultron-generator", "input": {"items": ROWS, "durationSecs": 1}}],
        }
        accepted = api.post("/runs", json=request)
        assert accepted.status_code == 202, accepted.text
        run_id = accepted.json()["runId"]
        assert api.get(f"/runs/{run_id}").json()["deliver"] == {"rows": "callback"}

        def summary_arrived() -> bool:
            return any(not is_row_batch(r) for r in receiver.received)

        eventually(summary_arrived, timeout=120, description="the summary callback")
        stored = api.get(f"/runs/{run_id}/items", params={"format": "ndjson", "limit": 10_000})
        assert stored.status_code == 200, stored.text

    received = list(receiver.received)
    summary_message = received[-1]
    assert not is_row_batch(summary_message), "a batch came after the summary"
    assert sum(not is_row_batch(r) for r in received) == 1
    data = verify(secret, summary_message.body, summary_message.headers)["data"]

    pushed = assemble_row_batches(received, secret)  # verifies every batch's signature
    (child,) = data["children"]
    cid = child["childId"]
    assert pushed.finished == {cid}
    assert pushed.seqs[cid] == [1, 2, 3]  # 1000, 1000 and 500 rows (the default row cap)
    rows = pushed.rows[cid]
    assert [r["itemIndex"] for r in rows] == list(range(ROWS))
    stored_rows = [json.loads(line) for line in stored.text.splitlines()]
    assert sorted(r["id"] for r in rows) == sorted(r["id"] for r in stored_rows)
    assert {json.dumps(r, sort_keys=True) for r in rows} == {
        json.dumps(r, sort_keys=True) for r in stored_rows
    }
    assert child["rowsPushed"] == {
        "batches": 3,
        "rows": ROWS,
        "rowsTotal": ROWS,
        "complete": True,
        "failedBatchSeq": None,
    }
    assert data["itemsTotal"] == ROWS and data["state"] == "succeeded"
