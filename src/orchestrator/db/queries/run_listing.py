"""Listing requests with filters and keyset (cursor) pagination.

Order is newest first by ``(created_at, id)``; the cursor is the last row's pair, so a page
boundary never shifts when new requests arrive (they sort before it) and no row is skipped
or repeated, unlike OFFSET paging.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection, and_, or_, select

from orchestrator.db.queries.runs import RunRecord
from orchestrator.db.schema import scrape_runs


@dataclass(frozen=True)
class RunFilter:
    workspace_id: str | None = None
    states: Sequence[str] = field(default_factory=tuple)
    skill_run_id: str | None = None
    conversation_id: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


RunKey = tuple[datetime, str]


def list_runs_page(
    conn: Connection, flt: RunFilter, *, after: RunKey | None = None, limit: int = 50
) -> tuple[list[RunRecord], RunKey | None]:
    """One page of requests matching ``flt`` after ``after``, and the key of the next page."""
    c = scrape_runs.c
    query = select(scrape_runs).order_by(c.created_at.desc(), c.id.desc()).limit(limit + 1)
    if flt.workspace_id is not None:
        query = query.where(c.workspace_id == flt.workspace_id)
    if flt.states:
        query = query.where(c.state.in_(list(flt.states)))
    if flt.skill_run_id is not None:
        query = query.where(c.skill_run_id == flt.skill_run_id)
    if flt.conversation_id is not None:
        query = query.where(c.conversation_id == flt.conversation_id)
    if flt.created_after is not None:
        query = query.where(c.created_at >= flt.created_after)
    if flt.created_before is not None:
        query = query.where(c.created_at < flt.created_before)
    if after is not None:
        created, run_id = after
        query = query.where(
            or_(c.created_at < created, and_(c.created_at == created, c.id < run_id))
        )
    rows = [RunRecord.from_row(row) for row in conn.execute(query).mappings()]
    if len(rows) <= limit:
        return rows, None
    page = rows[:limit]
    return page, (page[-1].created_at, page[-1].id)
