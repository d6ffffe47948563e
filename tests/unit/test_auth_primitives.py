"""API key format and hashing, callback secret derivation, callback payload and schedule."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

from orchestrator.activities.delivery import callback_payload, retry_delay_seconds
from orchestrator.db.queries.runs import ChildRecord, RunRecord
from orchestrator.delivery.sender import CALLBACK_RETRY_SCHEDULE
from orchestrator.domain.lifecycle import ChildState, RunState
from orchestrator.security.api_keys import (
    generate_api_key,
    hash_api_key,
    key_matches,
    parse_key_id,
)
from orchestrator.security.callback_secrets import derive_callback_secret, new_nonce
from orchestrator.workflows import policies


def test_keys_are_prefixed_random_checksummed_and_hashed() -> None:
    a, b = generate_api_key(), generate_api_key()
    assert a.plaintext != b.plaintext and a.key_id != b.key_id
    assert a.plaintext.startswith(f"ork_{a.key_id}_") and len(a.plaintext) == 4 + 12 + 1 + 43 + 6
    assert parse_key_id(a.plaintext) == a.key_id
    assert a.key_hash == hash_api_key(a.plaintext) and a.plaintext not in a.key_hash
    assert key_matches(a.key_hash, a.plaintext)
    assert not key_matches(a.key_hash, b.plaintext)
    assert not key_matches(None, a.plaintext)
    # Any changed character breaks the checksum; wrong shapes are rejected before any I/O.
    for i in (5, 20, len(a.plaintext) - 1):
        flipped = a.plaintext[:i] + ("x" if a.plaintext[i] != "x" else "y") + a.plaintext[i + 1 :]
        assert parse_key_id(flipped) is None
    for bad in ("", "ork_", a.plaintext + "a", a.plaintext[:-1], "ghp_" + a.plaintext[4:]):
        assert parse_key_id(bad) is None


def test_callback_secrets_are_derived_per_workspace_and_nonce() -> None:
    nonce = new_nonce()
    secret = derive_callback_secret("server", "ws_a", nonce)
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"))) == 32
    assert secret == derive_callback_secret("server", "ws_a", nonce)
    assert secret != derive_callback_secret("server", "ws_b", nonce)
    assert secret != derive_callback_secret("server", "ws_a", new_nonce())
    assert secret != derive_callback_secret("other", "ws_a", nonce)


def test_retry_policy_matches_the_documented_schedule() -> None:
    policy, schedule = policies.CALLBACK_RETRY, CALLBACK_RETRY_SCHEDULE
    assert policy.initial_interval.total_seconds() == schedule.initial_interval_seconds
    assert policy.backoff_coefficient == schedule.backoff_coefficient
    assert policy.maximum_interval is not None
    assert policy.maximum_interval.total_seconds() == schedule.maximum_interval_seconds
    assert policy.maximum_attempts == schedule.maximum_attempts
    waits = [retry_delay_seconds(n, 5.0, None) for n in range(1, schedule.maximum_attempts)]
    assert waits == schedule.waits()
    assert 23 * 3600 < sum(waits) < 24 * 3600
    assert retry_delay_seconds(1, 5.0, 120.0) == 120.0  # Retry-After, when longer
    assert retry_delay_seconds(3, 0.05, None) == 0.2  # scaled down for tests


def test_callback_payload_summarises_every_child() -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    run = RunRecord(
        id="run_1", workspace_id="ws", conversation_id="c", skill_run_id="s",
        callback_url="https://h.example/cb?token=t", state=RunState.PARTIAL, aborted=False,
        children_total=2, children_succeeded=1, children_failed=1, items_total=3,
        idempotency_key=None, request_hash=None, created_at=now, updated_at=now, finished_at=now,
    )  # fmt: skip

    def child(idx: int, state: ChildState, items: int, message: str | None) -> ChildRecord:
        return ChildRecord(
            id=f"run_1.{idx}", run_id="run_1", idx=idx, actor="a", platform_actor_id="p",
            input={}, options={}, state=state, platform_run_id="r", dataset_id="d",
            platform_status="X", status_message=message, items_ingested=items, ingest_offset=items,
            created_at=now, updated_at=now, started_at=now, finished_at=now,
        )  # fmt: skip

    payload = callback_payload(
        run,
        [child(0, ChildState.SUCCEEDED, 3, "ok"), child(1, ChildState.FAILED, 0, "boom")],
        "http://api.example/",
    )
    assert payload["type"] == "scrape.run.finished"
    assert payload["timestamp"] == "2026-01-02T03:04:05Z"
    data = payload["data"]
    assert (data["runId"], data["workspaceId"], data["skillId"], data["conversationId"]) == (
        "run_1", "ws", "s", "c",
    )  # fmt: skip
    assert data["state"] == "partial" and data["itemsTotal"] == 3
    assert [(c["state"], c["itemCount"], c["failureReason"]) for c in data["children"]] == [
        ("succeeded", 3, None),
        ("failed", 0, "boom"),
    ]
    assert data["links"]["items"] == "http://api.example/runs/run_1/items"
    assert "token" not in str(payload)
