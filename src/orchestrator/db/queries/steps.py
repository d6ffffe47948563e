"""Chained runs' inputs: reading a source run's rows page by page, and recording the built
input (or the skip) of a dependent run.

Rows are read by item index (keyset paging, one short read transaction per page), never
all at once: a source run may have any number of rows. The built input is written once
(``input_built_at`` guards it), with its event, so a retried activity changes nothing.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, select, update

from orchestrator.db.queries._common import utcnow
from orchestrator.db.queries.events import append_event, lock_run_events
from orchestrator.db.queries.runs import get_child, transition_child
from orchestrator.db.schema import scrape_children, scrape_items
from orchestrator.domain.lifecycle import ChildState


def rows_page(
    conn: Connection, child_id: str, after_index: int, limit: int
) -> list[tuple[int, str]]:
    """Up to ``limit`` rows of a child after item index ``after_index`` (-1: from the
    first), in item order, as (index, JSON text)."""
    query = (
        select(scrape_items.c.item_index, scrape_items.c.data)
        .where(scrape_items.c.child_id == child_id, scrape_items.c.item_index > after_index)
        .order_by(scrape_items.c.item_index)
        .limit(limit)
    )
    return [(int(index), str(data)) for index, data in conn.execute(query).all()]


def record_built_input(
    conn: Connection, child_id: str, built: dict[str, list[Any]], message: str
) -> bool:
    """Complete a pending chained child's input with the ``built`` fields, once. False when
    it was built already or the child is no longer pending (nothing is changed then)."""
    child = get_child(conn, child_id)
    if child is None:
        raise LookupError(f"unknown child {child_id}")
    lock_run_events(conn, child.run_id)
    child = get_child(conn, child_id) or child
    if child.input_built_at is not None or child.state is not ChildState.PENDING:
        return False
    counts = {name: len(values) for name, values in built.items()}
    conn.execute(
        update(scrape_children)
        .where(scrape_children.c.id == child_id)
        .values(
            input_json=json.dumps(child.input | built, separators=(",", ":")),
            input_built_json=json.dumps(counts, separators=(",", ":")),
            input_built_at=utcnow(),
            updated_at=utcnow(),
        )
    )
    append_event(
        conn,
        child.run_id,
        "child.input_built",
        message,
        child_id=child_id,
        data={"inputBuilt": counts},
        dedupe_key=f"{child_id}:input_built",
    )
    return True


def skip_child(conn: Connection, child_id: str, message: str, data: dict[str, Any]) -> bool:
    """End a chained child ``skipped`` (its input came out empty); False if it had already
    moved on (a retry, or an abort that came first)."""
    child = get_child(conn, child_id)
    if child is None:
        raise LookupError(f"unknown child {child_id}")
    if not transition_child(
        conn, child_id, ChildState.SKIPPED, message=message, status_message=message
    ):
        return False
    append_event(
        conn,
        child.run_id,
        "child.skipped",
        message,
        child_id=child_id,
        data=data,
        dedupe_key=f"{child_id}:skipped",
    )
    return True
