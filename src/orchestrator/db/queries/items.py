"""Scraped rows (``scrape_items``): idempotent page writes and stable paging.

A page is written in one statement keyed by (child, item index) with ON CONFLICT DO
NOTHING, together with the child's ingest cursor, so a retried or resumed ingest can
never store a row twice. Reads page by the surrogate ``id``, which only grows, so a cursor
stays valid while ingestion continues.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, select

from orchestrator.db.queries._common import insert_ignoring_conflicts, utcnow
from orchestrator.db.queries.runs import ChildRecord, RunRecord, set_ingest_progress
from orchestrator.db.schema import scrape_items


@dataclass(frozen=True)
class ItemRecord:
    id: int
    run_id: str
    child_id: str
    item_index: int
    actor: str
    data_json: str

    @property
    def data(self) -> Any:
        return json.loads(self.data_json)


def write_page(
    conn: Connection,
    run: RunRecord,
    child: ChildRecord,
    offset: int,
    encoded_items: Sequence[str],
) -> None:
    """Store one dataset page (items already JSON-encoded) and advance the child's cursor."""
    if encoded_items:
        now = utcnow()
        conn.execute(
            insert_ignoring_conflicts(conn, scrape_items, ["child_id", "item_index"]),
            [
                {
                    "run_id": run.id,
                    "child_id": child.id,
                    "item_index": offset + i,
                    "workspace_id": run.workspace_id,
                    "skill_run_id": run.skill_run_id,
                    "conversation_id": run.conversation_id,
                    "actor": child.actor,
                    "data": data,
                    "created_at": now,
                }
                for i, data in enumerate(encoded_items)
            ],
        )
    set_ingest_progress(conn, child.id, offset + len(encoded_items))


def list_items(
    conn: Connection,
    run_id: str,
    *,
    after_id: int = 0,
    limit: int = 100,
    child_id: str | None = None,
) -> list[ItemRecord]:
    query = (
        select(
            scrape_items.c.id,
            scrape_items.c.run_id,
            scrape_items.c.child_id,
            scrape_items.c.item_index,
            scrape_items.c.actor,
            scrape_items.c.data,
        )
        .where(scrape_items.c.run_id == run_id, scrape_items.c.id > after_id)
        .order_by(scrape_items.c.id)
        .limit(limit)
    )
    if child_id is not None:
        query = query.where(scrape_items.c.child_id == child_id)
    return [
        ItemRecord(
            id=row.id,
            run_id=row.run_id,
            child_id=row.child_id,
            item_index=row.item_index,
            actor=row.actor,
            data_json=row.data,
        )
        for row in conn.execute(query)
    ]


def count_items(conn: Connection, run_id: str) -> int:
    return int(
        conn.execute(
            select(func.count()).select_from(scrape_items).where(scrape_items.c.run_id == run_id)
        ).scalar_one()
    )
