"""API keys (``api_keys``): insert, look up by key id, list, revoke, note use.

Only hashes are stored (see ``orchestrator.security.api_keys``); nothing here ever sees a
plaintext key except ``insert_key``'s caller, which hashed it already.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, insert, select, update

from orchestrator.db.queries._common import as_utc, insert_ignoring_conflicts, utcnow
from orchestrator.db.schema import api_keys

#: ``last_used_at`` is refreshed at most this often, so authentication is not a write per
#: request (SQLite has one writer at a time).
LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True)
class ApiKeyRecord:
    id: str
    key_hash: str
    workspace_id: str | None
    name: str
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None

    @property
    def admin(self) -> bool:
        return self.workspace_id is None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def _record(row: object) -> ApiKeyRecord:
    mapping = row._mapping  # type: ignore[attr-defined]
    return ApiKeyRecord(
        id=mapping["id"],
        key_hash=mapping["key_hash"],
        workspace_id=mapping["workspace_id"],
        name=mapping["name"],
        created_at=as_utc(mapping["created_at"]) or utcnow(),
        revoked_at=as_utc(mapping["revoked_at"]),
        last_used_at=as_utc(mapping["last_used_at"]),
    )


def insert_key(
    conn: Connection,
    key_id: str,
    key_hash: str,
    *,
    workspace_id: str | None,
    name: str,
    if_absent: bool = False,
) -> bool:
    """Store a key; with ``if_absent`` an existing id is left alone. True if written."""
    values = {
        "id": key_id,
        "key_hash": key_hash,
        "workspace_id": workspace_id,
        "name": name,
        "created_at": utcnow(),
    }
    if not if_absent:
        conn.execute(insert(api_keys).values(values))
        return True
    stored = conn.execute(
        insert_ignoring_conflicts(conn, api_keys, ["id"]).values(values).returning(api_keys.c.id)
    ).first()
    return stored is not None


def get_key(conn: Connection, key_id: str) -> ApiKeyRecord | None:
    row = conn.execute(select(api_keys).where(api_keys.c.id == key_id)).first()
    return _record(row) if row else None


def list_keys(conn: Connection, *, workspace_id: str | None = None) -> list[ApiKeyRecord]:
    query = select(api_keys).order_by(api_keys.c.created_at, api_keys.c.id)
    if workspace_id is not None:
        query = query.where(api_keys.c.workspace_id == workspace_id)
    return [_record(row) for row in conn.execute(query)]


def revoke_key(conn: Connection, key_id: str) -> bool:
    """Revoke a key (idempotent). False if there is no such key."""
    if get_key(conn, key_id) is None:
        return False
    conn.execute(
        update(api_keys)
        .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
        .values(revoked_at=utcnow())
    )
    return True


def needs_touch(key: ApiKeyRecord) -> bool:
    """Whether ``key``'s last use is older than the resolution we record it at."""
    return key.last_used_at is None or utcnow() - key.last_used_at >= LAST_USED_RESOLUTION


def touch_key(conn: Connection, key: ApiKeyRecord) -> None:
    """Record that ``key`` was used, unless that was noted less than a minute ago."""
    if not needs_touch(key):
        return
    now = utcnow()
    conn.execute(update(api_keys).where(api_keys.c.id == key.id).values(last_used_at=now))
