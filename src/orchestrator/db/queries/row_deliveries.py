"""Rows pushed to the callback: each child's delivery cursor (``row_deliveries``).

The cursor is in the database, not in Temporal, for two reasons: the batch activity takes
only the child id (payloads stay small), and a worker that dies mid-push resumes from the
last acknowledged batch whatever workflow or attempt picks it up. Its invariants:

* rows ``[0, next_index)`` were acknowledged in batches ``1 .. next_seq - 1``;
* ``pending_end`` (exclusive item index) fixes batch ``next_seq`` once planned, so every
  retry sends the very same rows under the same ``webhook-id``;
* every update is conditional on ``next_seq``, so a late, overlapping attempt can never
  advance the cursor twice.

``rows_total`` is the child's stored rows when its push opened: the child is final then, so
no row arrives later (its ``ingest_offset`` is a contiguous prefix of item indexes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, select, update

from orchestrator.db.queries._common import insert_ignoring_conflicts, utcnow
from orchestrator.db.schema import row_deliveries
from orchestrator.domain.row_push import PUSH_DONE, PUSH_FAILED, PUSH_SENDING


@dataclass(frozen=True)
class RowDelivery:
    child_id: str
    run_id: str
    rows_total: int
    next_seq: int
    next_index: int
    pending_end: int | None
    batches_pushed: int
    rows_pushed: int
    state: str
    failed_seq: int | None

    @property
    def sending(self) -> bool:
        return self.state == PUSH_SENDING


def _record(row: Row[Any]) -> RowDelivery:
    m = row._mapping
    return RowDelivery(
        child_id=m["child_id"],
        run_id=m["run_id"],
        rows_total=int(m["rows_total"]),
        next_seq=int(m["next_seq"]),
        next_index=int(m["next_index"]),
        pending_end=None if m["pending_end"] is None else int(m["pending_end"]),
        batches_pushed=int(m["batches_pushed"]),
        rows_pushed=int(m["rows_pushed"]),
        state=m["state"],
        failed_seq=m["failed_seq"],
    )


def get_delivery(conn: Connection, child_id: str) -> RowDelivery | None:
    row = conn.execute(select(row_deliveries).where(row_deliveries.c.child_id == child_id)).first()
    return _record(row) if row is not None else None


def open_delivery(conn: Connection, run_id: str, child_id: str, rows_total: int) -> RowDelivery:
    """The child's cursor, created at batch 1 / item 0 if it has none (done at once when the
    child stored no rows). Idempotent: a cursor that exists is returned unchanged."""
    now = utcnow()
    conn.execute(
        insert_ignoring_conflicts(conn, row_deliveries, ["child_id"]).values(
            child_id=child_id,
            run_id=run_id,
            rows_total=rows_total,
            next_seq=1,
            next_index=0,
            pending_end=None,
            batches_pushed=0,
            rows_pushed=0,
            state=PUSH_SENDING if rows_total > 0 else PUSH_DONE,
            failed_seq=None,
            created_at=now,
            updated_at=now,
        )
    )
    found = get_delivery(conn, child_id)
    assert found is not None
    return found


def plan_batch(conn: Connection, child_id: str, seq: int, end: int) -> bool:
    """Fix batch ``seq`` as the rows up to ``end`` (exclusive); False if already planned."""
    d = row_deliveries.c
    result = conn.execute(
        update(row_deliveries)
        .where(
            d.child_id == child_id,
            d.next_seq == seq,
            d.pending_end.is_(None),
            d.state == PUSH_SENDING,
        )
        .values(pending_end=end, updated_at=utcnow())
    )
    return result.rowcount == 1


def acknowledge_batch(conn: Connection, child_id: str, seq: int) -> RowDelivery | None:
    """Batch ``seq`` was delivered: move the cursor past it (done after the last rows).
    None if the cursor had already moved (a late, duplicate attempt)."""
    current = get_delivery(conn, child_id)
    if current is None or current.next_seq != seq or current.pending_end is None:
        return None
    end = current.pending_end
    d = row_deliveries.c
    conn.execute(
        update(row_deliveries)
        .where(d.child_id == child_id, d.next_seq == seq)
        .values(
            next_seq=seq + 1,
            next_index=end,
            pending_end=None,
            batches_pushed=d.batches_pushed + 1,
            rows_pushed=d.rows_pushed + (end - current.next_index),
            state=PUSH_DONE if end >= current.rows_total else PUSH_SENDING,
            updated_at=utcnow(),
        )
    )
    return get_delivery(conn, child_id)


def give_up_batch(conn: Connection, child_id: str, seq: int) -> bool:
    """Batch ``seq`` could not be delivered: the child's push ends there (``failed``)."""
    d = row_deliveries.c
    result = conn.execute(
        update(row_deliveries)
        .where(d.child_id == child_id, d.next_seq == seq, d.state == PUSH_SENDING)
        .values(state=PUSH_FAILED, failed_seq=seq, updated_at=utcnow())
    )
    return result.rowcount == 1


def deliveries_of_run(conn: Connection, run_id: str) -> dict[str, RowDelivery]:
    """Every child's cursor of a request, by child id (children never pushed are absent)."""
    rows = conn.execute(select(row_deliveries).where(row_deliveries.c.run_id == run_id))
    return {r.child_id: _record(r) for r in rows}
