"""Helpers shared by the query modules: the clock, UTC normalisation and insert-or-ignore."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import Insert


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; everything we store is UTC."""
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def insert_ignoring_conflicts(
    conn: Connection, table: Table, conflict_columns: Sequence[str]
) -> Insert:
    """``INSERT … ON CONFLICT (cols) DO NOTHING`` in the connection's dialect."""
    dialect = conn.dialect.name
    stmt: Any
    if dialect == "sqlite":
        stmt = sqlite.insert(table).on_conflict_do_nothing(index_elements=list(conflict_columns))
    elif dialect == "postgresql":
        stmt = postgresql.insert(table).on_conflict_do_nothing(
            index_elements=list(conflict_columns)
        )
    else:  # pragma: no cover - only the two supported engines
        raise NotImplementedError(f"unsupported database dialect {dialect!r}")
    return stmt  # type: ignore[no-any-return]
