"""Outbound callbacks: Standard Webhooks signing, the SSRF guard and the one-attempt sender.

Owns the library pieces the delivery activity composes; it holds no retry loop and no
Temporal imports. Trade-off: the security-critical parts (``signing``, ``url_guard``) are
pure and importable on their own so they can be audited and tested without any I/O, while
``sender`` is the only module that touches the network.
"""

from orchestrator.delivery.sender import (
    CALLBACK_RETRY_SCHEDULE,
    CallbackSender,
    DeliveryOutcome,
    RetrySchedule,
    classify_response,
    parse_retry_after,
)
from orchestrator.delivery.signing import (
    WebhookVerificationError,
    callback_message_id,
    new_webhook_secret,
    signed_headers,
    verify,
)
from orchestrator.delivery.url_guard import (
    UnsafeCallbackUrl,
    check_callback_url,
    is_public_address,
    resolve_and_check,
)

__all__ = [
    "CALLBACK_RETRY_SCHEDULE",
    "CallbackSender",
    "DeliveryOutcome",
    "RetrySchedule",
    "UnsafeCallbackUrl",
    "WebhookVerificationError",
    "callback_message_id",
    "check_callback_url",
    "classify_response",
    "is_public_address",
    "new_webhook_secret",
    "parse_retry_after",
    "resolve_and_check",
    "signed_headers",
    "verify",
]
