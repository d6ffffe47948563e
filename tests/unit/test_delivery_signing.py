"""Standard Webhooks signing: verified by the standardwebhooks package itself."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from orchestrator.delivery.signing import (
    callback_message_id,
    new_webhook_secret,
    signed_headers,
    verify,
)

BODY = json.dumps({"type": "run.completed", "data": {"run_id": "run_1"}}).encode()
MSG_ID = "msg_0123456789abcdef"


def now() -> datetime:
    return datetime.now(UTC)


def test_new_secret_format() -> None:
    secret = new_webhook_secret()
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
    assert new_webhook_secret() != secret


def test_headers_shape() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)
    headers = signed_headers(new_webhook_secret(), MSG_ID, at, BODY)
    assert headers["webhook-id"] == MSG_ID
    assert headers["webhook-timestamp"] == str(int(at.timestamp()))
    assert headers["webhook-signature"].startswith("v1,")
    assert headers["content-type"] == "application/json"


def test_library_verifies_our_signature() -> None:
    secret = new_webhook_secret()
    headers = signed_headers(secret, MSG_ID, now(), BODY)
    assert Webhook(secret).verify(BODY, headers) == json.loads(BODY)
    assert verify(secret, BODY, headers) == json.loads(BODY)


def test_signature_is_plain_hmac_sha256_over_id_timestamp_body() -> None:
    # Contract test independent of the library: what any receiver in any language computes.
    secret = new_webhook_secret()
    headers = signed_headers(secret, MSG_ID, now(), BODY)
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{MSG_ID}.{headers['webhook-timestamp']}.".encode() + BODY
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    assert headers["webhook-signature"] == f"v1,{expected}"


@pytest.mark.parametrize("field", ["body", "id", "timestamp", "secret"])
def test_tampering_is_rejected(field: str) -> None:
    secret = new_webhook_secret()
    headers = signed_headers(secret, MSG_ID, now(), BODY)
    body = BODY
    if field == "body":
        body = BODY.replace(b"run_1", b"run_2")
    elif field == "id":
        headers["webhook-id"] = "msg_other"
    elif field == "timestamp":
        headers["webhook-timestamp"] = str(int(headers["webhook-timestamp"]) + 1)
    else:
        secret = new_webhook_secret()
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        verify(secret, body, headers)


def test_non_utc_aware_timestamp_is_converted() -> None:
    # standardwebhooks' sign() replaces the tzinfo; +02:00 would otherwise sign 2 h off.
    secret = new_webhook_secret()
    local = now().astimezone(timezone(timedelta(hours=2)))
    headers = signed_headers(secret, MSG_ID, local, BODY)
    assert headers["webhook-timestamp"] == str(int(local.timestamp()))
    Webhook(secret).verify(BODY, headers)


def test_stale_timestamp_is_rejected_by_receivers() -> None:
    secret = new_webhook_secret()
    headers = signed_headers(secret, MSG_ID, now() - timedelta(minutes=6), BODY)
    with pytest.raises(WebhookVerificationError, match="too old"):
        verify(secret, BODY, headers)


def test_naive_timestamp_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        signed_headers(new_webhook_secret(), MSG_ID, datetime(2026, 1, 1), BODY)  # noqa: DTZ001


@pytest.mark.parametrize("bad_id", ["", "msg.1", "msg 1"])
def test_bad_message_id_is_refused(bad_id: str) -> None:
    with pytest.raises(ValueError, match="message_id"):
        signed_headers(new_webhook_secret(), bad_id, now(), BODY)


def test_rotated_signature_list_verifies() -> None:
    old, new = new_webhook_secret(), new_webhook_secret()
    at = now()
    h_old = signed_headers(old, MSG_ID, at, BODY)
    h_new = signed_headers(new, MSG_ID, at, BODY)
    headers = {
        **h_new,
        "webhook-signature": f"{h_new['webhook-signature']} {h_old['webhook-signature']}",
    }
    assert verify(old, BODY, headers) == json.loads(BODY)
    assert verify(new, BODY, headers) == json.loads(BODY)


@pytest.mark.parametrize(
    "signature",
    ["no-comma-at-all", "v1,@@not-base64@@", "v1,abc"],
)
def test_malformed_signature_header_maps_to_verification_error(signature: str) -> None:
    secret = new_webhook_secret()
    headers = {**signed_headers(secret, MSG_ID, now(), BODY), "webhook-signature": signature}
    with pytest.raises(WebhookVerificationError):
        verify(secret, BODY, headers)


def test_non_json_authentic_body_maps_to_verification_error() -> None:
    secret = new_webhook_secret()
    body = b"not json"
    headers = signed_headers(secret, MSG_ID, now(), body)
    assert verify(secret, body, headers, json_parse=False) is None
    with pytest.raises(WebhookVerificationError):
        verify(secret, body, headers)


def test_missing_headers_rejected() -> None:
    secret = new_webhook_secret()
    with pytest.raises(WebhookVerificationError, match="Missing"):
        verify(secret, BODY, {})


def test_callback_message_id_is_stable_and_distinct() -> None:
    a = callback_message_id("run_1", "succeeded")
    assert a == callback_message_id("run_1", "succeeded")
    assert a.startswith("msg_") and "." not in a
    others = {
        callback_message_id("run_1", "failed"),
        callback_message_id("run_2", "succeeded"),
        callback_message_id("run_1s", "ucceeded"),
    }
    assert a not in others and len(others) == 3
