"""Per-workspace callback signing secrets, derived rather than stored (pure).

Each workspace signs its callbacks (Standard Webhooks, HMAC-SHA256) with its own secret
``whsec_<base64 of 32 bytes>``. The database keeps only a random *nonce* per workspace; the
secret is ``HMAC-SHA256(server key, "callback-secret" ‖ workspace ‖ nonce)``. Rotating a
secret means drawing a new nonce (the previous one is kept for a grace period, during which
callbacks carry both signatures, as the spec allows for zero-downtime rotation).

Trade-off: a copy of the database alone (a backup, a read replica) reveals no signing
secret, without adding an encryption library; the price is that the server key
(``ORCHESTRATOR_CALLBACK_SECRET_KEY``) must be the same on every API and worker process, and
changing it changes every workspace's secret at once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Final

from orchestrator.delivery.signing import SECRET_PREFIX

NONCE_BYTES: Final = 16


def new_nonce() -> str:
    """A fresh random nonce (hex), the stored half of a workspace's secret."""
    return secrets.token_hex(NONCE_BYTES)


def derive_callback_secret(server_key: str, workspace_id: str, nonce: str) -> str:
    """The ``whsec_…`` secret of ``workspace_id`` for ``nonce`` under ``server_key``."""
    if not server_key:
        raise ValueError("the callback secret server key is empty")
    message = b"\x1f".join((b"callback-secret", workspace_id.encode(), nonce.encode()))
    digest = hmac.new(server_key.encode(), message, hashlib.sha256).digest()
    return SECRET_PREFIX + base64.b64encode(digest).decode("ascii")
