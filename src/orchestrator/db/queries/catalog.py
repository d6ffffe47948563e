"""The actor catalog's change log (``actor_catalog_changes``): one row per catalog version.

Every write to an actor entry (create, replace, delete; by an operator or by the seed)
appends one row here in the same transaction as the entry itself, so the catalog version
(the highest row) and the entries can never disagree. Versions are numbered by the writer:
writers are serialised by a transaction-scoped advisory lock on PostgreSQL and by SQLite's
single writer (``BEGIN IMMEDIATE``), and the version is the primary key, so even a writer
that skipped the lock could not record one version twice.

Entries are stored as the JSON the registry stores (``null`` for a deletion), so this module
needs nothing of the entry's model and ``registry`` can import it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Connection, func, insert, select, text

from orchestrator.db.queries._common import as_utc, utcnow
from orchestrator.db.schema import actor_catalog_changes

#: Advisory lock (int4, int4) of catalog writers: namespace, key (events use 7_204_002).
CATALOG_LOCK = (7_204_012, 1)

ChangeKind = Literal["created", "replaced", "deleted"]


@dataclass(frozen=True)
class CatalogChange:
    version: int
    actor: str
    change: ChangeKind
    #: The entry after the change, as stored (camelCase JSON); None for a deletion.
    entry: dict[str, Any] | None
    changed_by: str
    changed_at: datetime


def lock_catalog(conn: Connection, *, shared: bool = False) -> None:
    """Serialise catalog writers until the transaction ends; ``shared`` for a reader that
    needs the entries and the version to agree (it waits only for a writer). A no-op on
    SQLite, whose writers are serialised already."""
    if conn.dialect.name == "postgresql":
        fn = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
        conn.execute(text(f"SELECT {fn}(:a, :b)"), {"a": CATALOG_LOCK[0], "b": CATALOG_LOCK[1]})


def current_version(conn: Connection) -> int:
    """The catalog version now: the number of changes ever made (0 before the first)."""
    found = conn.execute(select(func.max(actor_catalog_changes.c.version))).scalar_one()
    return int(found or 0)


def actor_versions(conn: Connection) -> dict[str, int]:
    """Each actor's latest change's version (deleted actors included)."""
    rows = conn.execute(
        select(actor_catalog_changes.c.actor, func.max(actor_catalog_changes.c.version)).group_by(
            actor_catalog_changes.c.actor
        )
    )
    return {actor: int(version) for actor, version in rows}


def record_change(
    conn: Connection,
    actor: str,
    value_json: str | None,
    *,
    change: ChangeKind,
    changed_by: str,
) -> int:
    """Append a change (the caller holds :func:`lock_catalog`); returns its version."""
    version = current_version(conn) + 1
    conn.execute(
        insert(actor_catalog_changes).values(
            version=version,
            actor=actor,
            change=change,
            entry_json=value_json,
            changed_by=changed_by,
            changed_at=utcnow(),
        )
    )
    return version


def history(conn: Connection, actor: str) -> list[CatalogChange]:
    """Every change of ``actor``, oldest first (empty if it was never in the catalog)."""
    rows = conn.execute(
        select(actor_catalog_changes)
        .where(actor_catalog_changes.c.actor == actor)
        .order_by(actor_catalog_changes.c.version)
    ).mappings()
    return [
        CatalogChange(
            version=row["version"],
            actor=row["actor"],
            change=row["change"],
            entry=json.loads(row["entry_json"]) if row["entry_json"] is not None else None,
            changed_by=row["changed_by"],
            changed_at=as_utc(row["changed_at"]) or utcnow(),
        )
        for row in rows
    ]
