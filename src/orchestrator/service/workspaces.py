"""Workspace callback secrets: rotate (the new secret is returned once), and look up the
secrets that sign a callback. Secrets are derived, never stored (see
``orchestrator.security.callback_secrets``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection

from orchestrator.db.queries import workspaces as workspace_queries
from orchestrator.domain.errors import NotFound
from orchestrator.security.callback_secrets import derive_callback_secret, new_nonce
from orchestrator.service.auth import Principal


@dataclass(frozen=True)
class RotatedSecret:
    workspace_id: str
    callback_secret: str
    rotated_at: datetime
    previous_valid_until: datetime | None


def rotate_callback_secret(
    conn: Connection,
    workspace_id: str,
    *,
    server_key: str,
    grace: timedelta,
    caller: Principal | None = None,
) -> RotatedSecret:
    """A new callback secret for ``workspace_id``; with ``caller``, only for a workspace the
    caller may see (another tenant's is reported as missing)."""
    if caller is not None and not caller.may_see(workspace_id):
        raise NotFound(f"workspace {workspace_id} does not exist", field="workspaceId")
    nonce = new_nonce()
    record = workspace_queries.rotate_secret(conn, workspace_id, nonce, grace=grace)
    return RotatedSecret(
        workspace_id=workspace_id,
        callback_secret=derive_callback_secret(server_key, workspace_id, nonce),
        rotated_at=record.secret_rotated_at,
        previous_valid_until=record.previous_secret_expires_at,
    )


def signing_secrets(
    conn: Connection, workspace_id: str, *, server_key: str, now: datetime
) -> list[str]:
    """The secrets a callback of ``workspace_id`` is signed with now (current first)."""
    record, _ = workspace_queries.ensure_workspace(conn, workspace_id, new_nonce)
    return [
        derive_callback_secret(server_key, workspace_id, nonce)
        for nonce in record.signing_nonces(now)
    ]
