"""The append-only event log (``scrape_events``).

Events that must appear once (state transitions, webhook dispatches) carry a dedupe key and
are inserted with ON CONFLICT DO NOTHING, so retried activities do not repeat them; attempts
(polls, retries, callback tries) are logged every time they happen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select

from orchestrator.db.queries._common import as_utc, insert_ignoring_conflicts, utcnow
from orchestrator.db.schema import scrape_events


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
    values = {
        "run_id": run_id,
        "child_id": child_id,
        "kind": kind,
        "message": message,
        "data_json": json.dumps(data, separators=(",", ":")) if data is not None else None,
        "dedupe_key": dedupe_key,
        "created_at": utcnow(),
    }
    if dedupe_key is None:
        conn.execute(insert(scrape_events).values(values))
        return True
    # RETURNING, because rowcount is not reported for this statement on every driver.
    stored = conn.execute(
        insert_ignoring_conflicts(conn, scrape_events, ["dedupe_key"])
        .values(values)
        .returning(scrape_events.c.id)
    ).first()
    return stored is not None


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
