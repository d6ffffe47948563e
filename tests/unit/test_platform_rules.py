"""Pure platform rules: error classification and webhook tokens."""

from __future__ import annotations

from orchestrator.platform.apify import classify_api_error
from orchestrator.platform.port import ErrorKind
from orchestrator.platform.webhook_auth import derive_webhook_token, verify_webhook_token


def test_error_classification() -> None:
    assert classify_api_error(429, "rate-limit-exceeded") is ErrorKind.RETRYABLE
    assert classify_api_error(500, None) is ErrorKind.RETRYABLE
    assert classify_api_error(503, "query-timeout") is ErrorKind.RETRYABLE
    assert classify_api_error(402, "actor-memory-limit-exceeded") is ErrorKind.CAPACITY
    assert classify_api_error(402, "concurrent-runs-limit-exceeded") is ErrorKind.CAPACITY
    assert classify_api_error(402, "not-enough-usage-to-run-paid-actor") is ErrorKind.PERMANENT
    assert classify_api_error(400, "invalid-input") is ErrorKind.PERMANENT
    assert classify_api_error(404, "record-not-found") is ErrorKind.PERMANENT


def test_webhook_tokens_are_per_child_and_secret() -> None:
    token = derive_webhook_token("server-secret", "run_a.0")
    assert verify_webhook_token("server-secret", "run_a.0", token)
    assert not verify_webhook_token("server-secret", "run_a.1", token)
    assert not verify_webhook_token("other-secret", "run_a.0", token)
    assert not verify_webhook_token("server-secret", "run_a.0", token[:-1] + "x")
    assert not verify_webhook_token("server-secret", "run_a.0", "")
