"""The append-only event log (``scrape_events``).

Events that must appear once (state transitions, webhook dispatches) carry a dedupe key and
are inserted with ON CONFLICT DO NOTHING, so retried activities do not repeat them; attempts
(polls, retries, callback tries) are logged every time they happen.

Readers page a request's events by id, so ids must become visible in order. SQLite writes
one transaction at a time, so they do. On PostgreSQL a sequence hands out ids at insert
time and transactions may commit in another order, which could let a reader's cursor pass
an event that commits later; so every append first takes a transaction-scoped advisory
lock for its request, held to commit: a request's events are numbered in commit order.
The lock is per request; page writes, the bulk of an ingest, take it only after their COPY
(``items.store_new_page``), so it is never held while rows are copied.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, insert, select, text

from orchestrator.db.queries._common import as_utc, insert_ignoring_conflicts, utcnow
from orchestrator.db.schema import scrape_events

# Advisory locks are (int4, int4) pairs; the first names this use, the second the request.
EVENT_LOCK_NAMESPACE = 7_204_002


def _lock_key(run_id: str) -> int:
    return zlib.crc32(run_id.encode()) - 2**31  # into int4's range


def lock_run_events(conn: Connection, run_id: str) -> bool:
    """Serialise, until commit, the transactions that append events to ``run_id``.

    A transaction that appends events and also writes rows must call this before its first
    row write: every writer then takes the lock first and the row locks after, in the same
    order, so they cannot deadlock. Re-entrant within a transaction; a no-op on SQLite.
    Returns whether a lock was taken (and so whether the caller may have waited for it).
    """
    if conn.dialect.name != "postgresql":
        return False
    conn.execute(
        text("SELECT pg_advisory_xact_lock(:namespace, :key)"),
        {"namespace": EVENT_LOCK_NAMESPACE, "key": _lock_key(run_id)},
    )
    return True


@dataclass(frozen=True)
class EventRecord:
    id: int
    run_id: str
    child_id: str | None
    kind: str
    message: str
    data: dict[str, Any] | None
    created_at: datetime


def append_event(
    conn: Connection,
    run_id: str,
    kind: str,
    message: str,
    *,
    child_id: str | None = None,
    data: dict[str, Any] | None = None,
    dedupe_key: str | None = None,
) -> bool:
    """Append one event; with a ``dedupe_key`` a repeat is silently dropped. True if stored."""
    event = NewEvent(kind, message, child_id, data)
    if dedupe_key is None:
        append_events(conn, run_id, [event])
        return True
    lock_run_events(conn, run_id)
    # RETURNING, because rowcount is not reported for this statement on every driver.
    stored = conn.execute(
        insert_ignoring_conflicts(conn, scrape_events, ["dedupe_key"])
        .values(_event_values(run_id, event, dedupe_key))
        .returning(scrape_events.c.id)
    ).first()
    return stored is not None


@dataclass(frozen=True)
class NewEvent:
    """An event to append without a dedupe key (an attempt, a page read)."""

    kind: str
    message: str
    child_id: str | None = None
    data: dict[str, Any] | None = None


def append_events(conn: Connection, run_id: str, events: Sequence[NewEvent]) -> None:
    """Append several events of one request, in order: one lock and one statement."""
    if not events:
        return
    lock_run_events(conn, run_id)
    conn.execute(insert(scrape_events), [_event_values(run_id, event, None) for event in events])


def _event_values(run_id: str, event: NewEvent, dedupe_key: str | None) -> dict[str, Any]:
    data = event.data
    return {
        "run_id": run_id,
        "child_id": event.child_id,
        "kind": event.kind,
        "message": event.message,
        "data_json": json.dumps(data, separators=(",", ":")) if data is not None else None,
        "dedupe_key": dedupe_key,
        "created_at": utcnow(),
    }


def list_events(
    conn: Connection, run_id: str, *, after_id: int = 0, limit: int = 500
) -> list[EventRecord]:
    rows = conn.execute(
        select(scrape_events)
        .where(scrape_events.c.run_id == run_id, scrape_events.c.id > after_id)
        .order_by(scrape_events.c.id)
        .limit(limit)
    ).mappings()
    return [
        EventRecord(
            id=row["id"],
            run_id=row["run_id"],
            child_id=row["child_id"],
            kind=row["kind"],
            message=row["message"],
            data=json.loads(row["data_json"]) if row["data_json"] else None,
            created_at=as_utc(row["created_at"]) or utcnow(),
        )
        for row in rows
    ]


# Which logged events stand for one platform API call each, and of which kind.
PLATFORM_CALL_KINDS = {
    "child.spawn_attempt": "start",
    "child.spawn_lookup": "lookup",
    "child.poll": "status",
    "child.ingest_page": "datasetPage",
    "child.abort": "abort",
}


def platform_calls(conn: Connection, run_id: str) -> dict[str, dict[str, int]]:
    """Platform API calls made for each child of a request, by kind (from the event log).

    Calls the HTTP client retried by itself (429, 5xx) count once: this is what the
    orchestrator asked for, not what crossed the wire.
    """
    rows = conn.execute(
        select(scrape_events.c.child_id, scrape_events.c.kind, func.count())
        .where(
            scrape_events.c.run_id == run_id,
            scrape_events.c.kind.in_(list(PLATFORM_CALL_KINDS)),
            scrape_events.c.child_id.is_not(None),
        )
        .group_by(scrape_events.c.child_id, scrape_events.c.kind)
    ).all()
    calls: dict[str, dict[str, int]] = {}
    for child_id, kind, count in rows:
        calls.setdefault(child_id, {})[PLATFORM_CALL_KINDS[kind]] = int(count)
    return calls


def event_exists(conn: Connection, dedupe_key: str) -> bool:
    """Whether a one-off event with ``dedupe_key`` has been recorded."""
    return (
        conn.execute(
            select(scrape_events.c.id).where(scrape_events.c.dedupe_key == dedupe_key)
        ).first()
        is not None
    )
