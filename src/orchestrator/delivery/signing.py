"""Standard Webhooks signing for outbound callbacks (pure: no I/O, no clock, no logging).

Owns the wire contract a callback receiver verifies: the ``webhook-id``,
``webhook-timestamp`` and ``webhook-signature`` headers (HMAC-SHA256 over
``"{id}.{timestamp}.{body}"``, ``v1,<base64>``), the ``whsec_`` secret format, and the rule
that the message id is stable across retries while the timestamp is per attempt.

Trade-off: signing goes through the ``standardwebhooks`` package, so we are byte-compatible
with every receiver that uses a Standard Webhooks library, at the cost of wrapping two of
its pitfalls here: ``Webhook.sign`` replaces (instead of converting) the timezone, so a
non-UTC datetime would sign the wrong instant; and ``Webhook.verify`` lets malformed
signature headers escape as ``ValueError``/``binascii.Error``. The caller supplies the
timestamp (``datetime.now(timezone.utc)`` per attempt), which keeps this module
deterministic and trivially testable.
"""

from __future__ import annotations

import base64
import hashlib
import math
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from standardwebhooks import Webhook, WebhookVerificationError

SECRET_PREFIX: Final = "whsec_"  # noqa: S105 - a format prefix, not a secret
#: The spec asks for 24-64 random bytes; 32 bytes (256 bits) matches the HMAC-SHA256 output.
SECRET_BYTES: Final = 32

__all__ = [
    "SECRET_PREFIX",
    "WebhookVerificationError",
    "callback_message_id",
    "new_webhook_secret",
    "signed_headers",
    "signed_headers_for_all",
    "verify",
]


def new_webhook_secret() -> str:
    """A fresh per-endpoint signing secret: ``whsec_`` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def callback_message_id(run_id: str, state: str) -> str:
    """The ``webhook-id`` for the callback announcing that ``run_id`` reached ``state``.

    Derived, not random, so every retry (even after a worker crash) reuses the same id and
    receivers can de-duplicate on it, as the spec asks. The separator keeps ("ab", "c") and
    ("a", "bc") apart; hex output never contains the "." the spec forbids in ids.
    """
    digest = hashlib.sha256(f"{run_id}\x1f{state}".encode()).hexdigest()
    return f"msg_{digest[:32]}"


def signed_headers(
    secret: str, message_id: str, timestamp: datetime, body: bytes
) -> dict[str, str]:
    """Headers for one delivery attempt of ``body`` (the exact bytes that will be sent).

    ``timestamp`` is the attempt time and must be timezone-aware; it is converted to UTC
    and truncated to whole seconds so the header and the signed value agree.

    Raises:
        ValueError: naive ``timestamp``, empty or "."-containing ``message_id``, or a body
            that is not UTF-8 (the library signs text).
    """
    if timestamp.tzinfo is None or timestamp.utcoffset() is None:
        raise ValueError("timestamp must be timezone-aware")
    if not message_id or "." in message_id or any(c.isspace() for c in message_id):
        raise ValueError("message_id must be non-empty without '.' or whitespace")
    # Convert, then hand the library a UTC datetime: it calls replace(tzinfo=utc).
    attempt_at = timestamp.astimezone(UTC).replace(microsecond=0)
    signature = Webhook(secret).sign(message_id, attempt_at, body.decode("utf-8"))
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(math.floor(attempt_at.timestamp())),
        "webhook-signature": signature,
        "content-type": "application/json",
    }


def signed_headers_for_all(
    secrets_in_use: list[str], message_id: str, timestamp: datetime, body: bytes
) -> dict[str, str]:
    """``signed_headers`` with one signature per secret (the current one first), space-
    separated as Standard Webhooks specifies: during a rotation's grace period a receiver
    holding either secret verifies the message."""
    if not secrets_in_use:
        raise ValueError("at least one secret is needed")
    headers = signed_headers(secrets_in_use[0], message_id, timestamp, body)
    for extra in secrets_in_use[1:]:
        other = signed_headers(extra, message_id, timestamp, body)
        headers["webhook-signature"] += " " + other["webhook-signature"]
    return headers


def verify(
    secret: str, body: bytes | str, headers: Mapping[str, str], *, json_parse: bool = True
) -> Any:
    """Verify a received callback and return its parsed JSON (``None`` if not ``json_parse``).

    Every rejection - including malformed signature headers, a non-UTF-8 body and an
    authentic body that is not JSON - raises ``WebhookVerificationError``, so a receiver
    needs one ``except`` to answer 400. A bad *secret* is a configuration error and is
    deliberately not mapped.

    Raises:
        WebhookVerificationError: the message is not authentic, fresh (±5 min) or well formed.
    """
    webhook = Webhook(secret)
    try:
        return webhook.verify(body, dict(headers), json_parse=json_parse)
    except WebhookVerificationError:
        raise
    except ValueError as exc:
        # binascii.Error, UnicodeDecodeError and JSONDecodeError are all ValueError.
        raise WebhookVerificationError("Invalid Signature Headers") from exc
