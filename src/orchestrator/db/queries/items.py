"""Scraped rows (``scrape_items``): idempotent page writes and stable paging.

A page is written in one statement keyed by (child, item index) with ON CONFLICT DO
NOTHING, together with the child's ingest cursor, so a retried or resumed ingest can
never store a row twice. On PostgreSQL a page may be written while the one before it is
still committing (``PageTurn``): the COPYs overlap on two backends, the cursor still moves
in page order. Rows are read for the API by ``item_pages`` (per-child offsets,
not ids: ids can commit out of order on PostgreSQL).
"""

from __future__ import annotations

import threading
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
# A page written behind another: its lock waits are bounded (``TURN_TIMEOUT_SECONDS``).
_PG_BEHIND_SETTINGS = "SELECT set_config('lock_timeout', %s, true)"
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


class CursorMoved(RuntimeError):
    """A page written behind another found the ingest cursor elsewhere than where the page
    begins: the page before it did not commit, or another attempt moved the cursor. Its
    transaction rolls back; the retry resumes from the committed cursor."""


#: How long a page written behind another waits for that one to reach the cursor, and the
#: longest lock wait of such a page (another attempt's rows, the cursor): two attempts of one
#: ingest (one of them past its heartbeat) never wait on each other for ever.
TURN_TIMEOUT_SECONDS = 30.0


class PageTurn:
    """The order in which overlapping page writes of one ingest claim the child's cursor.

    A page's write holds its turn from the moment it holds the cursor's row lock until its
    transaction ends; the page after it copies its rows meanwhile, then waits for that turn
    and asks for the lock itself, which PostgreSQL grants once the page before committed or
    rolled back. Thread-safe: writes run on worker threads.
    """

    def __init__(self, before: PageTurn | None) -> None:
        self.before = before
        self._reached = threading.Event()
        self._failed = False

    def reached(self) -> None:
        """This page holds the cursor's lock (or has failed): the next may ask for it."""
        self._reached.set()

    def failed(self) -> None:
        self._failed = True
        self._reached.set()

    def wait_for_the_page_before(self) -> None:
        before = self.before
        if before is None:
            return
        if not before._reached.wait(TURN_TIMEOUT_SECONDS) or before._failed:
            raise CursorMoved("the page before this one was not written")


def write_page(
    conn: Connection,
    run: RunRecord,
    child: ChildRecord,
    offset: int,
    encoded_items: Sequence[str],
    turn: PageTurn | None = None,
) -> None:
    """Store one dataset page (items as JSON text) and advance the child's cursor.

    Each engine gets its fastest idempotent bulk path, straight on the driver: the rows are
    plain tuples, so SQLAlchemy's per-row parameter processing is skipped. ``turn`` (on
    PostgreSQL) lets this page be written while the page before it is still being written.
    """
    try:
        _write_page(conn, run, child, offset, encoded_items, turn)
    except BaseException:
        if turn is not None:
            turn.failed()
        raise
    if turn is not None:
        turn.reached()


def _write_page(
    conn: Connection,
    run: RunRecord,
    child: ChildRecord,
    offset: int,
    encoded_items: Sequence[str],
    turn: PageTurn | None,
) -> None:
    if turn is not None and turn.before is not None:
        if conn.dialect.name != "postgresql":  # pragma: no cover - the caller checks
            raise NotImplementedError(conn.dialect.name)
        _pg_write_behind(conn, run, child, offset, encoded_items, turn)
        set_ingest_progress(conn, child.id, offset + len(encoded_items))
        return
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
        _pg_copy(
            cursor, _PG_COPY_DIRECT if fresh else _PG_COPY, run, child, offset, encoded_items, now
        )
        if not fresh:
            cursor.execute(_PG_MERGE)
            cursor.execute("TRUNCATE scrape_items_stage")


def _pg_write_behind(
    conn: Connection,
    run: RunRecord,
    child: ChildRecord,
    offset: int,
    encoded_items: Sequence[str],
    turn: PageTurn,
) -> None:
    """A page written while the one before it may still be committing.

    Its rows are copied straight in with no lock held (rows at or past the committed cursor
    are never stored: they commit only with the cursor), so its COPY runs beside the page
    before. Then it waits for its turn, locks the cursor, which PostgreSQL grants once the
    page before has committed, and goes on only from exactly ``offset``. Anything else rolls it
    back (``CursorMoved``); so does a COPY that meets rows another attempt holds (the unique
    index). Rows and cursor still commit together, so a retry resumes from the committed cursor
    and nothing is stored twice.
    """
    raw: Any = conn.connection.driver_connection
    with raw.cursor() as cursor:
        cursor.execute(_PG_BEHIND_SETTINGS, (f"{int(TURN_TIMEOUT_SECONDS * 1000)}ms",))
        _pg_copy(cursor, _PG_COPY_DIRECT, run, child, offset, encoded_items, utcnow())
        turn.wait_for_the_page_before()
        cursor.execute(_PG_CURSOR_FOR_UPDATE, (child.id,))
        committed = cursor.fetchone()[0]
        if committed != offset:
            raise CursorMoved(f"ingest cursor of {child.id} at {committed}, page at {offset}")


def _pg_copy(
    cursor: Any,
    statement: str,
    run: RunRecord,
    child: ChildRecord,
    offset: int,
    encoded_items: Sequence[str],
    now: datetime,
) -> None:
    with cursor.copy(statement) as copy:
        copy.set_types(_PG_COPY_TYPES)
        head = (run.id, child.id)
        tail = (run.workspace_id, run.skill_run_id, run.conversation_id, child.actor)
        for i, data in enumerate(encoded_items):
            copy.write_row((*head, offset + i, *tail, data, now))
