"""Scraped rows (``scrape_items``): idempotent page writes and stable paging.

Rows are keyed by (child, item index) and a page is written in one transaction with the
child's ingest cursor, so a retried or resumed ingest can never store a row twice: the
ingest's fast path (``store_new_page``) inserts plainly and checks the cursor after, and
anything it finds already written goes through the merge (``store_page``, ON CONFLICT DO
NOTHING). Rows are read for the API by ``item_pages`` (per-child offsets, not ids: ids can
commit out of order on PostgreSQL).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from orchestrator.db.queries._common import utcnow
from orchestrator.db.queries.events import NewEvent, append_events, lock_run_events
from orchestrator.db.queries.runs import ChildRecord, RunRecord, set_ingest_progress

_SQLITE_INSERT = """
INSERT INTO scrape_items (run_id, child_id, item_index, workspace_id, skill_run_id,
                          conversation_id, actor, data, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (child_id, item_index) DO NOTHING
"""
# PostgreSQL: COPY (temporal-notes.md §4.2): straight into the table for a fresh page, or into
# a per-connection staging table merged with one INSERT … ON CONFLICT DO NOTHING when some of
# the page may already be stored. The cursor read FOR UPDATE also turns off the wait for the
# WAL flush at this transaction's commit (see write_page).
PG_STAGE = """
CREATE TEMP TABLE IF NOT EXISTS scrape_items_stage (
    run_id text, child_id text, item_index bigint, workspace_id text, skill_run_id text,
    conversation_id text, actor text, data text, created_at timestamptz
) ON COMMIT DELETE ROWS
"""
_PG_CURSOR_FOR_UPDATE = """
SELECT ingest_offset, set_config('synchronous_commit', 'off', true)
FROM scrape_children WHERE id = %s FOR UPDATE
"""
# The fast path's cursor move: only from exactly this page's offset (else another attempt
# wrote here first), and it makes the commit asynchronous as the statement above does.
_PG_ADVANCE_CURSOR = """
UPDATE scrape_children SET ingest_offset = %s, items_ingested = %s, updated_at = %s
WHERE id = %s AND ingest_offset = %s
RETURNING set_config('synchronous_commit', 'off', true)
"""
# The columns in the order of a binary COPY row (binary_copy_page): the page's constant ones
# first, so they are one piece of bytes shared by every row.
_PG_COPY_COLUMNS = (
    "run_id, child_id, workspace_id, skill_run_id, conversation_id, actor, created_at, "
    "item_index, data"
)
PG_COPY_DIRECT = f"COPY scrape_items ({_PG_COPY_COLUMNS}) FROM STDIN (FORMAT BINARY)"
PG_COPY_STAGE = f"COPY scrape_items_stage ({_PG_COPY_COLUMNS}) FROM STDIN (FORMAT BINARY)"
_PG_MERGE = """
INSERT INTO scrape_items (run_id, child_id, item_index, workspace_id, skill_run_id,
                          conversation_id, actor, data, created_at)
SELECT run_id, child_id, item_index, workspace_id, skill_run_id,
       conversation_id, actor, data, created_at
FROM scrape_items_stage ORDER BY item_index
ON CONFLICT (child_id, item_index) DO NOTHING
"""

# PostgreSQL's binary COPY format (docs: "COPY", Binary Format): a signature, flags and an
# extension length; per row a field count, then each field's length (-1: NULL) and bytes; a
# trailer of -1.
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
_COPY_TRAILER = b"\xff\xff"
_COPY_FIELDS = struct.Struct(">h").pack(9)
_COPY_NULL = struct.Struct(">i").pack(-1)
_COPY_INDEX_AND_DATA_LENGTH = struct.Struct(">iqi").pack
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


#: A row's routing columns: (run, child, workspace, skill run, conversation, actor).
Tagging = tuple[str, str, str, str | None, str | None, str]


def _copy_text(value: str | None) -> bytes:
    if value is None:
        return _COPY_NULL
    raw = value.encode()
    return struct.pack(">i", len(raw)) + raw


def binary_copy_page(
    tagging: Tagging,
    created_at: datetime,
    offset: int,
    items: Sequence[bytes],
) -> bytes:
    """One page as a binary COPY stream in ``_PG_COPY_COLUMNS`` order.

    Built here rather than row by row through the driver's ``write_row``: everything but an
    item's index and data is the same for the whole page, so it is encoded once, and the
    items go in as the bytes the platform sent, never decoded to ``str`` and encoded back
    (measured: 0.43 µs a row against 1.65 µs). PostgreSQL still checks each item is valid
    UTF-8 text.
    """
    micros = (created_at - _PG_EPOCH) // timedelta(microseconds=1)
    constant = b"".join(
        (
            _COPY_FIELDS,
            *(_copy_text(value) for value in tagging),
            struct.pack(">iq", 8, micros),
        )
    )
    parts = [_COPY_HEADER]
    for index, data in enumerate(items, offset):
        parts += (constant, _COPY_INDEX_AND_DATA_LENGTH(8, index, len(data)), data)
    parts.append(_COPY_TRAILER)
    return b"".join(parts)


def write_page(
    conn: Connection,
    run: RunRecord,
    child: ChildRecord,
    offset: int,
    encoded_items: Sequence[bytes],
) -> None:
    """Store one dataset page (each item's JSON as UTF-8 bytes, as the platform sent it) and
    advance the child's cursor.

    Each engine gets its fastest idempotent bulk path, straight on the driver: the rows are
    plain tuples (SQLite) or one COPY stream (PostgreSQL), so SQLAlchemy's per-row parameter
    processing is skipped.
    """
    if encoded_items:
        now = utcnow()
        dialect = conn.dialect.name
        if dialect == "sqlite":
            head = (run.id, child.id)
            tail = (run.workspace_id, run.skill_run_id, run.conversation_id, child.actor)
            # SQLAlchemy's own SQLite DateTime storage format, so reads parse it back.
            stamp = now.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
            rows = [
                (*head, offset + i, *tail, data.decode(), stamp)
                for i, data in enumerate(encoded_items)
            ]
            conn.exec_driver_sql(_SQLITE_INSERT, rows)
        elif dialect == "postgresql":
            _pg_write(conn, run, child, offset, encoded_items, now)
        else:  # pragma: no cover - only the two supported engines
            raise NotImplementedError(dialect)
    set_ingest_progress(conn, child.id, offset + len(encoded_items))


class StalePage(Exception):
    """``store_new_page`` found rows of its page stored, or the cursor past its offset: another
    attempt of the same ingest wrote there first. Its transaction must roll back, and the page
    go through ``store_page``, which merges."""


def store_page(
    conn: Connection,
    run: RunRecord,
    child: ChildRecord,
    offset: int,
    encoded_items: Sequence[bytes],
    events: Sequence[NewEvent],
) -> None:
    """A page's rows, the cursor and the page's events, whatever of it is stored already."""
    lock_run_events(conn, run.id)  # before the cursor's row lock, as every writer takes them
    write_page(conn, run, child, offset, encoded_items)
    append_events(conn, run.id, events)


def store_new_page(
    conn: Connection,
    run: RunRecord,
    child: ChildRecord,
    offset: int,
    encoded_items: Sequence[bytes],
    events: Sequence[NewEvent],
) -> None:
    """The ingest's fast path for a page that should start exactly at the committed cursor:
    as ``store_page``, or ``StalePage`` when it does not.

    On PostgreSQL the rows are COPied straight in with no lock held and nothing read first;
    only then are the request's event lock and the cursor's row taken, for the events and a
    compare-and-set of the cursor, so the lock other writers of the request's events wait on
    is held for the end of the transaction only, and a batch costs one read and one commit
    fewer than reading the cursor first and logging apart. Exactly once still: a row another
    attempt stored makes the COPY fail on the unique key, and a cursor another attempt moved
    makes the compare-and-set miss; either raises ``StalePage`` and nothing of this one
    commits.
    """
    if conn.dialect.name != "postgresql" or not encoded_items:
        store_page(conn, run, child, offset, encoded_items, events)  # SQLite: one writer
        return
    import psycopg  # only with PostgreSQL, whose driver is an optional dependency

    end = offset + len(encoded_items)
    now = utcnow()
    raw: Any = conn.connection.driver_connection
    with raw.cursor() as cursor:
        try:
            with cursor.copy(PG_COPY_DIRECT) as copy:
                copy.write(binary_copy_page(_tagging(run, child), now, offset, encoded_items))
        except psycopg.errors.UniqueViolation:
            raise StalePage from None
        append_events(conn, run.id, events)
        cursor.execute(_PG_ADVANCE_CURSOR, (end, end, now, child.id, offset))
        if cursor.fetchone() is None:
            raise StalePage


def _tagging(run: RunRecord, child: ChildRecord) -> Tagging:
    """The routing columns every row of a child carries, in ``binary_copy_page`` order."""
    return (run.id, child.id, run.workspace_id, run.skill_run_id, run.conversation_id, child.actor)


def _pg_write(
    conn: Connection,
    run: RunRecord,
    child: ChildRecord,
    offset: int,
    encoded_items: Sequence[bytes],
    now: datetime,
) -> None:
    raw: Any = conn.connection.driver_connection
    with raw.cursor() as cursor:
        # Rows and cursor always commit together, so when the committed cursor is exactly
        # this page's offset none of its rows can exist yet: COPY them straight in. Anything
        # else (a retried or overlapping page) is merged.
        #
        # The same statement makes this commit asynchronous (no wait for the WAL flush, the
        # one cost per page that grows with a busy disk). Exactly-once still holds: rows and
        # cursor stay in one transaction, so a PostgreSQL crash can only lose a suffix of
        # whole pages, which the resumed ingest writes again from the cursor that survived;
        # and any later synchronous commit (the child's final transition, a delivery's
        # progress) flushes every page before it, so nothing depends on a lost page.
        cursor.execute(_PG_CURSOR_FOR_UPDATE, (child.id,))
        committed = cursor.fetchone()[0]
        fresh = committed == offset
        if not fresh:
            cursor.execute(PG_STAGE)
        with cursor.copy(PG_COPY_DIRECT if fresh else PG_COPY_STAGE) as copy:
            copy.write(binary_copy_page(_tagging(run, child), now, offset, encoded_items))
        if not fresh:
            cursor.execute(_PG_MERGE)
            cursor.execute("TRUNCATE scrape_items_stage")
