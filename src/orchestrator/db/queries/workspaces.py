"""Workspaces (``workspaces``): the nonces from which callback signing secrets are derived.

A workspace row appears the first time a key or a request names the workspace. Rotation
moves the current nonce to ``previous_secret_nonce`` with an expiry, so for a grace period
callbacks are signed with both secrets. The secrets themselves are derived in
``orchestrator.security.callback_secrets`` and never stored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, select, update

from orchestrator.db.queries._common import as_utc, insert_ignoring_conflicts, utcnow
from orchestrator.db.schema import workspaces


@dataclass(frozen=True)
class WorkspaceRecord:
    id: str
    secret_nonce: str
    previous_secret_nonce: str | None
    previous_secret_expires_at: datetime | None
    created_at: datetime
    secret_rotated_at: datetime

    def signing_nonces(self, now: datetime) -> list[str]:
        """Nonces whose secrets sign a callback sent at ``now``: current first."""
        nonces = [self.secret_nonce]
        if (
            self.previous_secret_nonce
            and self.previous_secret_expires_at is not None
            and now < self.previous_secret_expires_at
        ):
            nonces.append(self.previous_secret_nonce)
        return nonces


def get_workspace(conn: Connection, workspace_id: str) -> WorkspaceRecord | None:
    row = conn.execute(select(workspaces).where(workspaces.c.id == workspace_id)).first()
    if row is None:
        return None
    m = row._mapping
    return WorkspaceRecord(
        id=m["id"],
        secret_nonce=m["secret_nonce"],
        previous_secret_nonce=m["previous_secret_nonce"],
        previous_secret_expires_at=as_utc(m["previous_secret_expires_at"]),
        created_at=as_utc(m["created_at"]) or utcnow(),
        secret_rotated_at=as_utc(m["secret_rotated_at"]) or utcnow(),
    )


def ensure_workspace(
    conn: Connection, workspace_id: str, new_nonce: Callable[[], str]
) -> tuple[WorkspaceRecord, bool]:
    """The workspace's row, created with a fresh nonce if missing; True if created now."""
    now = utcnow()
    created = conn.execute(
        insert_ignoring_conflicts(conn, workspaces, ["id"])
        .values(id=workspace_id, secret_nonce=new_nonce(), created_at=now, secret_rotated_at=now)
        .returning(workspaces.c.id)
    ).first()
    record = get_workspace(conn, workspace_id)
    assert record is not None
    return record, created is not None


def rotate_secret(
    conn: Connection, workspace_id: str, nonce: str, *, grace: timedelta
) -> WorkspaceRecord:
    """Give the workspace a new nonce; the old one keeps signing for ``grace``."""
    current, _ = ensure_workspace(conn, workspace_id, lambda: nonce)
    if current.secret_nonce != nonce:
        now = utcnow()
        conn.execute(
            update(workspaces)
            .where(workspaces.c.id == workspace_id)
            .values(
                secret_nonce=nonce,
                previous_secret_nonce=current.secret_nonce,
                previous_secret_expires_at=now + grace if grace.total_seconds() > 0 else None,
                secret_rotated_at=now,
            )
        )
    record = get_workspace(conn, workspace_id)
    assert record is not None
    return record


def get_concurrency_limit(conn: Connection, workspace_id: str) -> int | None:
    """Most platform runs the workspace may hold at once (capacity admission); None: none."""
    limit = conn.execute(
        select(workspaces.c.max_concurrent_runs).where(workspaces.c.id == workspace_id)
    ).scalar_one_or_none()
    return None if limit is None else int(limit)


def set_concurrency_limit(
    conn: Connection, workspace_id: str, limit: int | None, new_nonce: Callable[[], str]
) -> None:
    """Give the workspace a concurrency limit (creating its row if need be), or none."""
    ensure_workspace(conn, workspace_id, new_nonce)
    conn.execute(
        update(workspaces).where(workspaces.c.id == workspace_id).values(max_concurrent_runs=limit)
    )
