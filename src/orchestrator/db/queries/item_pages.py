"""Paging a request's rows with a cursor that stays exact while ingestion continues.

A cursor is a vector of per-child offsets (``{child index: next item index}``), not a row
id. Why: row ids come from a sequence, and on PostgreSQL two children ingesting at once can
commit out of id order, so an "id > last seen" cursor can silently skip rows that commit
late. Item indexes of one child, by contrast, are written as a contiguous prefix: a dataset
page is committed together with the child's ``ingest_offset`` (``items.write_page``), and a
page is only written after the ones before it. Rows below ``ingest_offset`` are therefore
all visible, and a page is planned from that watermark alone, before any row is read.

Planning first is what lets the routes stream: the page's extent and the next cursor are
known up front (headers can carry it), then rows are read in small chunks by
``(child_id, item_index)`` (the unique index) and written out as they come, so a page of
any size is never held in memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, select

from orchestrator.db.schema import scrape_children, scrape_items

READ_CHUNK = 500


@dataclass(frozen=True)
class ChildSlice:
    child_id: str
    idx: int
    start: int
    count: int


@dataclass(frozen=True)
class ItemPagePlan:
    slices: list[ChildSlice]
    next_offsets: dict[int, int]
    #: Rows already stored beyond this page (more can still arrive while the run is live).
    more_stored: bool

    @property
    def count(self) -> int:
        return sum(s.count for s in self.slices)


@dataclass(frozen=True)
class ItemRow:
    id: int
    run_id: str
    child_id: str
    item_index: int
    workspace_id: str
    skill_run_id: str | None
    conversation_id: str | None
    actor: str
    data: str  # the item as stored: JSON text


def plan_page(
    conn: Connection,
    run_id: str,
    offsets: Mapping[int, int],
    *,
    limit: int,
    child_id: str | None = None,
    actor: str | None = None,
) -> ItemPagePlan:
    """Which rows form the next page after ``offsets``, children in index order."""
    c = scrape_children.c
    query = select(c.id, c.idx, c.actor, c.ingest_offset).where(c.run_id == run_id).order_by(c.idx)
    if child_id is not None:
        query = query.where(c.id == child_id)
    if actor is not None:
        query = query.where(c.actor == actor)
    remaining = limit
    slices: list[ChildSlice] = []
    next_offsets = dict(offsets)
    more = False
    for row in conn.execute(query):
        start = max(0, offsets.get(row.idx, 0))
        available = max(0, int(row.ingest_offset) - start)
        take = min(available, remaining)
        if take:
            slices.append(ChildSlice(child_id=row.id, idx=row.idx, start=start, count=take))
            remaining -= take
        next_offsets[row.idx] = start + take
        if available > take:
            more = True
    return ItemPagePlan(slices=slices, next_offsets=next_offsets, more_stored=more)


def stream_rows(
    engine: Engine, plan: ItemPagePlan, *, chunk: int = READ_CHUNK
) -> Iterator[ItemRow]:
    """The rows of ``plan`` in order, read ``chunk`` at a time (a connection per chunk)."""
    for part in plan.slices:
        end = part.start + part.count
        for low in range(part.start, end, chunk):
            high = min(low + chunk, end)
            with engine.connect() as conn:
                rows = read_rows(conn, part.child_id, low, high)
            yield from rows


def read_rows(conn: Connection, child_id: str, start: int, end: int) -> list[ItemRow]:
    """The stored rows of ``child_id`` with ``start <= item index < end``, in order."""
    i = scrape_items.c
    found = conn.execute(
        select(
            i.id,
            i.run_id,
            i.child_id,
            i.item_index,
            i.workspace_id,
            i.skill_run_id,
            i.conversation_id,
            i.actor,
            i.data,
        )
        .where(i.child_id == child_id, i.item_index >= start, i.item_index < end)
        .order_by(i.item_index)
    ).all()
    return [
        ItemRow(
            id=r.id,
            run_id=r.run_id,
            child_id=r.child_id,
            item_index=r.item_index,
            workspace_id=r.workspace_id,
            skill_run_id=r.skill_run_id,
            conversation_id=r.conversation_id,
            actor=r.actor,
            data=r.data,
        )
        for r in found
    ]


def item_json(row: ItemRow) -> str:
    """The row as one line of JSON in the item shape of ``GET /runs/{id}/items`` (routing
    fields, then ``data`` spliced in as stored); also the line of a pushed batch."""
    head = json.dumps(
        {
            "id": row.id,
            "runId": row.run_id,
            "childId": row.child_id,
            "itemIndex": row.item_index,
            "workspaceId": row.workspace_id,
            "skillId": row.skill_run_id,
            "conversationId": row.conversation_id,
            "actor": row.actor,
        },
        separators=(",", ":"),
    )
    return head[:-1] + ',"data":' + row.data + "}"
