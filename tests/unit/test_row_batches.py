"""Rows pushed to the callback, the pure parts: how rows are cut into batches (row and byte
caps, a row larger than the byte cap), the NDJSON body, the batch's headers and webhook-id,
and that a batch verifies with a Standard Webhooks library like the final callback."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
import standardwebhooks

from orchestrator.db.queries.item_pages import ItemRow, item_json
from orchestrator.delivery.row_batches import (
    BatchInfo,
    batch_headers,
    encode_lines,
    row_batch_message_id,
)
from orchestrator.delivery.sender import CALLBACK_RETRY_SCHEDULE
from orchestrator.delivery.signing import new_webhook_secret, signed_headers_for_all, verify
from orchestrator.domain.row_push import BatchLimits, batch_length, cut_batches, fits
from orchestrator.workflows import policies


def test_the_row_cap_cuts_batches_in_order() -> None:
    assert cut_batches([10] * 25, BatchLimits(max_rows=10, max_bytes=10_000)) == [10, 10, 5]
    assert cut_batches([10] * 20, BatchLimits(max_rows=10, max_bytes=10_000)) == [10, 10]
    assert cut_batches([], BatchLimits(max_rows=10, max_bytes=10_000)) == []


def test_the_byte_cap_counts_whole_lines() -> None:
    limits = BatchLimits(max_rows=1000, max_bytes=100)
    # 40 + 40 = 80 fits, a third 40 would make 120: three batches of 2, 2 and 1.
    assert cut_batches([40] * 5, limits) == [2, 2, 1]
    # Exactly at the cap is inside it.
    assert cut_batches([50, 50, 50], limits) == [2, 1]


def test_a_row_larger_than_the_byte_cap_goes_alone() -> None:
    limits = BatchLimits(max_rows=1000, max_bytes=100)
    assert cut_batches([10, 500, 10, 10], limits) == [1, 1, 2]
    assert cut_batches([500], limits) == [1]
    assert batch_length([500, 1], limits) == 1
    assert fits(0, 0, 10**9, limits)  # an empty batch takes any row
    assert not fits(1, 10, 91, limits)
    assert not fits(1000, 0, 1, limits)  # the row cap


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        BatchLimits(max_rows=0, max_bytes=10)
    with pytest.raises(ValueError, match="positive"):
        BatchLimits(max_rows=1, max_bytes=0)


def _row(index: int, data: dict[str, object]) -> ItemRow:
    return ItemRow(
        id=100 + index,
        run_id="run_abc",
        child_id="run_abc.1",
        item_index=index,
        workspace_id="ws_1",
        skill_run_id="skill_1",
        conversation_id=None,
        actor="ultron-leadgen",
        data=json.dumps(data),
    )


def test_the_body_is_ndjson_in_the_item_shape() -> None:
    body = encode_lines(item_json(_row(i, {"n": i, "name": "Zoë"})) for i in range(3))
    assert body.endswith(b"\n") and body.count(b"\n") == 3
    rows = [json.loads(line) for line in body.decode("utf-8").splitlines()]
    assert [r["itemIndex"] for r in rows] == [0, 1, 2]
    assert rows[0] == {
        "id": 100,
        "runId": "run_abc",
        "childId": "run_abc.1",
        "itemIndex": 0,
        "workspaceId": "ws_1",
        "skillId": "skill_1",
        "conversationId": None,
        "actor": "ultron-leadgen",
        "data": {"n": 0, "name": "Zoë"},
    }
    assert encode_lines([]) == b""


def test_a_batch_id_is_derived_per_child_and_sequence_number() -> None:
    assert row_batch_message_id("run_abc.1", 3) == "rows_run_abc_1_3"
    assert row_batch_message_id("run_abc.1", 3) == row_batch_message_id("run_abc.1", 3)
    assert row_batch_message_id("run_abc.1", 3) != row_batch_message_id("run_abc.1", 4)
    assert row_batch_message_id("run_abc.1", 1) != row_batch_message_id("run_abc.2", 1)
    assert "." not in row_batch_message_id("run_a.b.c", 1)
    with pytest.raises(ValueError, match="start at 1"):
        row_batch_message_id("run_abc.1", 0)


def test_the_headers_name_the_batch() -> None:
    info = BatchInfo(
        run_id="run_abc",
        child_id="run_abc.1",
        seq=2,
        first_index=10,
        last_index=19,
        rows=10,
        rows_total=20,
        last=True,
    )
    assert batch_headers(info) == {
        "content-type": "application/x-ndjson",
        "x-orchestrator-run-id": "run_abc",
        "x-orchestrator-child-id": "run_abc.1",
        "x-orchestrator-batch-seq": "2",
        "x-orchestrator-batch-last": "true",
        "x-orchestrator-batch-rows": "10",
        "x-orchestrator-first-item-index": "10",
        "x-orchestrator-last-item-index": "19",
        "x-orchestrator-child-rows-total": "20",
    }


def test_a_batch_is_signed_with_every_secret_in_use() -> None:
    current, previous = new_webhook_secret(), new_webhook_secret()
    body = encode_lines(item_json(_row(i, {"n": i})) for i in range(2))
    now = datetime.now(UTC)
    headers = signed_headers_for_all([current, previous], "rows_run_abc_1_1", now, body)
    assert headers["webhook-id"] == "rows_run_abc_1_1"
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (current, previous):
        assert verify(secret, body, headers, json_parse=False) is None
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        verify(new_webhook_secret(), body, headers, json_parse=False)
    # A body changed in transit (a row dropped) no longer verifies.
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        verify(current, body.split(b"\n", 1)[1], headers, json_parse=False)
    with pytest.raises(ValueError, match="at least one"):
        signed_headers_for_all([], "rows_x_1", now, body)


def test_batches_are_retried_on_the_callbacks_schedule() -> None:
    rows, callback = policies.ROWS_RETRY, policies.CALLBACK_RETRY
    assert rows.initial_interval == callback.initial_interval
    assert rows.backoff_coefficient == callback.backoff_coefficient
    assert rows.maximum_interval == callback.maximum_interval
    assert rows.maximum_attempts == CALLBACK_RETRY_SCHEDULE.maximum_attempts
    assert rows.non_retryable_error_types == [policies.ERR_ROWS_PERMANENT]
