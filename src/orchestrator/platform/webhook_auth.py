"""Authentication of inbound platform webhooks (pure; no I/O).

Apify does not sign webhooks. Each ad-hoc webhook we register carries, in a header template,
a token derived from the child id with a server secret (HMAC-SHA256), so no per-child secret
has to be stored and a token for one child is useless for another. Verification is constant
time.
"""

from __future__ import annotations

import hashlib
import hmac

WEBHOOK_TOKEN_HEADER = "X-Orchestrator-Webhook-Token"  # noqa: S105 - a header name
# The child id travels in the webhook URL's query: it is not secret, and it lets a start
# whose answer was lost be found again by listing webhooks.
WEBHOOK_CHILD_PARAM = "child"
TERMINAL_EVENT_TYPES = (
    "ACTOR.RUN.SUCCEEDED",
    "ACTOR.RUN.FAILED",
    "ACTOR.RUN.ABORTED",
    "ACTOR.RUN.TIMED_OUT",
)


def derive_webhook_token(server_secret: str, child_id: str) -> str:
    return hmac.new(
        server_secret.encode(), b"platform-webhook:" + child_id.encode(), hashlib.sha256
    ).hexdigest()


def verify_webhook_token(server_secret: str, child_id: str, token: str) -> bool:
    expected = derive_webhook_token(server_secret, child_id)
    return hmac.compare_digest(expected.encode(), token.encode())
