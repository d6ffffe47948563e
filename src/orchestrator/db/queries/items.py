"""Scraped rows (``scrape_items``): idempotent page writes and stable paging.

A page is written in one statement keyed by (child, item index) with ON CONFLICT DO
NOTHING, together with the child's ingest cursor, so a retried or resumed ingest can
never store a row twice. Rows are read for the API by ``item_pages`` (per-child offsets,
not ids: ids can commit out of order on PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from orchestrator.db.queries._common import utcnow
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
_PG_STAGE = """
CREATE TEMP TABLE IF NOT EXISTS scrape_items_stage (
    run_id text, child_id text, item_index bigint, workspace_id text, skill_run_id text,
    conversation_id text, actor text, data text, created_at timestamptz
) ON COMMIT DELETE ROWS
"""
_PG_CURSOR_FOR_UPDATE = """
SELECT ingest_offset, set_config('synchronous_commit', 'off', true)
FROM scrape_children WHERE id = %s FOR UPDATE
"""
_PG_COPY_DIRECT = """
COPY scrape_items (run_id, child_id, item_index, workspace_id, skill_run_id,
                   conversation_id, actor, data, created_at) FROM STDIN (FORMAT BINARY)
"""
_PG_COPY = """
COPY scrape_items_stage (run_id, child_id, item_index, workspace_id, skill_run_id,
                         conversation_id, actor, data, created_at) FROM STDIN (FORMAT BINARY)
"""
# Binary COPY: PostgreSQL reads each value by its length instead of scanning the text for
# delimiters and escapes (measured: less CPU on both sides than text COPY for these rows).
_PG_COPY_TYPES = ("text", "text", "int8", "text", "text", "text", "text", "text", "timestamptz")
_PG_MERGE = """
INSERT INTO scrape_items (run_id, child_id, item_index, workspace_id, skill_run_id,
                          conversation_id, actor, data, created_at)
SELECT run_id, child_id, item_index, workspace_id, skill_run_id,
       conversation_id, actor, data, created_at
FROM scrape_items_stage ORDER BY item_index
ON CONFLICT (child_id, item_index) DO NOTHING
"""


def write_page(
    conn: Connection,
    run: RunRecord,
    child: ChildRecord,
    offset: int,
    encoded_items: Sequence[str],
) -> None:
    """Store one dataset page (items as JSON text) and advance the child's cursor.

    Each engine gets its fastest idempotent bulk path, straight on the driver: the rows are
    plain tuples, so SQLAlchemy's per-row parameter processing is skipped.
    """
    if encoded_items:
        now = utcnow()
        dialect = conn.dialect.name
        if dialect == "sqlite":
            head = (run.id, child.id)
            tail = (run.workspace_id, run.skill_run_id, run.conversation_id, child.actor)
            # SQLAlchemy's own SQLite DateTime storage format, so reads parse it back.
            stamp = now.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
            rows = [(*head, offset + i, *tail, data, stamp) for i, data in enumerate(encoded_items)]
            conn.exec_driver_sql(_SQLITE_INSERT, rows)
        elif dialect == "postgresql":
            _pg_write(conn, run, child, offset, encoded_items, now)
        else:  # pragma: no cover - only the two supported engines
            raise NotImplementedError(dialect)
    set_ingest_progress(conn, child.id, offset + len(encoded_items))


def _pg_write(
    conn: Connection,
    run: RunRecord,
    child: ChildRecord,
    offset: int,
    encoded_items: Sequence[str],
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
            cursor.execute(_PG_STAGE)
        with cursor.copy(_PG_COPY_DIRECT if fresh else _PG_COPY) as copy:
            copy.set_types(_PG_COPY_TYPES)
            head = (run.id, child.id)
            tail = (run.workspace_id, run.skill_run_id, run.conversation_id, child.actor)
            for i, data in enumerate(encoded_items):
                copy.write_row((*head, offset + i, *tail, data, now))
        if not fresh:
            cursor.execute(_PG_MERGE)
            cursor.execute("TRUNCATE scrape_items_stage")
