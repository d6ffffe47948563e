"""Requests (``scrape_runs``) and their child actor runs (``scrape_children``).

Child transitions and the header roll-up happen in one transaction: a child's new state,
its event, and the header's recomputed state are written together, so the read model never
shows a header that disagrees with its children.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, RowMapping, delete, func, insert, select, update

from orchestrator.db.queries._common import as_utc, utcnow
from orchestrator.db.queries.events import append_event, lock_run_events
from orchestrator.db.schema import scrape_children, scrape_events, scrape_runs
from orchestrator.domain.lifecycle import (
    ChildState,
    RunState,
    child_transition_allowed,
    is_partial,
    roll_up,
    run_is_terminal,
)


@dataclass(frozen=True)
class NewChild:
    id: str
    idx: int
    actor: str
    platform_actor_id: str
    input: dict[str, Any]
    options: dict[str, Any]
    #: Chained run: input fields built from earlier runs' rows (``StepSource.stored()`` by
    #: field name); None for a run whose input is complete.
    input_from: dict[str, dict[str, Any]] | None = None


@dataclass(frozen=True)
class NewRun:
    id: str
    workspace_id: str
    conversation_id: str | None
    skill_run_id: str | None
    callback_url: str | None
    idempotency_key: str | None = None
    request_hash: str | None = None
    #: The request's budget (USD), already split into the children's maxTotalChargeUsd.
    budget_usd: float | None = None
    children: Sequence[NewChild] = field(default_factory=tuple)
    keep_partial_rows: bool = True
    #: The stored plan the request was made from, if any.
    plan_id: str | None = None
    #: The actor catalog version the request was validated against.
    catalog_version: int | None = None
    #: ``callback``: each child's rows are pushed to the callback URL (0013).
    deliver_rows: str = "none"


@dataclass(frozen=True)
class RunRecord:
    id: str
    workspace_id: str
    conversation_id: str | None
    skill_run_id: str | None
    callback_url: str | None
    state: RunState
    aborted: bool
    children_total: int
    children_succeeded: int
    children_failed: int
    items_total: int
    idempotency_key: str | None
    request_hash: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    keep_partial_rows: bool = True
    budget_usd: float | None = None
    # Why the request was stopped (``domain.spending.BUDGET_EXHAUSTED``), and how it was said.
    stop_reason: str | None = None
    stop_message: str | None = None
    plan_id: str | None = None
    catalog_version: int | None = None
    #: ``callback``: each child's rows are pushed to the callback URL (0013).
    deliver_rows: str = "none"

    @property
    def terminal(self) -> bool:
        """Every child has ended (``partial`` is terminal then, and live before)."""
        return self.finished_at is not None

    @classmethod
    def from_row(cls, row: RowMapping) -> RunRecord:
        return cls(
            id=row["id"],
            workspace_id=row["workspace_id"],
            conversation_id=row["conversation_id"],
            skill_run_id=row["skill_run_id"],
            callback_url=row["callback_url"],
            state=RunState(row["state"]),
            aborted=bool(row["aborted"]),
            children_total=row["children_total"],
            children_succeeded=row["children_succeeded"],
            children_failed=row["children_failed"],
            items_total=row["items_total"],
            idempotency_key=row["idempotency_key"],
            request_hash=row["request_hash"],
            created_at=as_utc(row["created_at"]) or utcnow(),
            updated_at=as_utc(row["updated_at"]) or utcnow(),
            finished_at=as_utc(row["finished_at"]),
            keep_partial_rows=bool(row["keep_partial_rows"]),
            budget_usd=row["budget_usd"],
            stop_reason=row["stop_reason"],
            stop_message=row["stop_message"],
            plan_id=row["plan_id"],
            catalog_version=row["catalog_version"],
            deliver_rows=row["deliver_rows"],
        )


@dataclass(frozen=True)
class ChildRecord:
    id: str
    run_id: str
    idx: int
    actor: str
    platform_actor_id: str
    input: dict[str, Any]
    options: dict[str, Any]
    state: ChildState
    platform_run_id: str | None
    dataset_id: str | None
    platform_status: str | None
    status_message: str | None
    items_ingested: int
    ingest_offset: int
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    # Spend: the highest usageTotalUsd seen (None before the first read that had one), the
    # charged events (pay-per-event), and when the figure was settled (final).
    usage_total_usd: float | None = None
    charged_event_counts: dict[str, int] = field(default_factory=dict)
    usage_settled_at: datetime | None = None
    # Chained run: its sources (StepSource.stored() by field name), and once its input is
    # built, the number of values of each built field and when.
    input_from: dict[str, dict[str, Any]] | None = None
    input_built: dict[str, int] | None = None
    input_built_at: datetime | None = None

    @property
    def waiting(self) -> bool:
        """A chained run whose input is not built yet (it waits for earlier runs)."""
        return (
            self.input_from is not None
            and self.input_built_at is None
            and self.state is ChildState.PENDING
        )

    @property
    def partial(self) -> bool:
        """It kept rows but did not succeed (derived, never stored)."""
        return is_partial(self.state, self.items_ingested)

    @classmethod
    def from_row(cls, row: RowMapping) -> ChildRecord:
        return cls(
            id=row["id"],
            run_id=row["run_id"],
            idx=row["idx"],
            actor=row["actor"],
            platform_actor_id=row["platform_actor_id"],
            input=json.loads(row["input_json"]),
            options=json.loads(row["options_json"]),
            state=ChildState(row["state"]),
            platform_run_id=row["platform_run_id"],
            dataset_id=row["dataset_id"],
            platform_status=row["platform_status"],
            status_message=row["status_message"],
            items_ingested=row["items_ingested"],
            ingest_offset=row["ingest_offset"],
            created_at=as_utc(row["created_at"]) or utcnow(),
            updated_at=as_utc(row["updated_at"]) or utcnow(),
            started_at=as_utc(row["started_at"]),
            finished_at=as_utc(row["finished_at"]),
            usage_total_usd=row["usage_total_usd"],
            charged_event_counts=json.loads(row["charged_events_json"] or "{}"),
            usage_settled_at=as_utc(row["usage_settled_at"]),
            input_from=_json_or_none(row["input_from_json"]),
            input_built=_json_or_none(row["input_built_json"]),
            input_built_at=as_utc(row["input_built_at"]),
        )


def _json_or_none(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def insert_run(conn: Connection, run: NewRun) -> None:
    """Insert a header (queued) and its children (pending); the caller owns the transaction."""
    now = utcnow()
    conn.execute(
        insert(scrape_runs).values(
            id=run.id,
            workspace_id=run.workspace_id,
            conversation_id=run.conversation_id,
            skill_run_id=run.skill_run_id,
            callback_url=run.callback_url,
            state=RunState.QUEUED.value,
            aborted=0,
            keep_partial_rows=int(run.keep_partial_rows),
            children_total=len(run.children),
            children_succeeded=0,
            children_failed=0,
            items_total=0,
            idempotency_key=run.idempotency_key,
            request_hash=run.request_hash,
            budget_usd=run.budget_usd,
            plan_id=run.plan_id,
            catalog_version=run.catalog_version,
            deliver_rows=run.deliver_rows,
            created_at=now,
            updated_at=now,
        )
    )
    conn.execute(
        insert(scrape_children),
        [
            {
                "id": child.id,
                "run_id": run.id,
                "idx": child.idx,
                "actor": child.actor,
                "platform_actor_id": child.platform_actor_id,
                "input_json": json.dumps(child.input, separators=(",", ":")),
                "options_json": json.dumps(child.options, separators=(",", ":")),
                "input_from_json": None
                if child.input_from is None
                else json.dumps(child.input_from, separators=(",", ":")),
                "state": ChildState.PENDING.value,
                "items_ingested": 0,
                "ingest_offset": 0,
                "created_at": now,
                "updated_at": now,
            }
            for child in run.children
        ],
    )
    append_event(
        conn,
        run.id,
        "run.created",
        f"request accepted with {len(run.children)} actor run(s)",
        data={"state": RunState.QUEUED.value, "children": len(run.children)},
        dedupe_key=f"{run.id}:created",
    )


def get_run(conn: Connection, run_id: str) -> RunRecord | None:
    row = conn.execute(select(scrape_runs).where(scrape_runs.c.id == run_id)).mappings().first()
    return RunRecord.from_row(row) if row else None


def find_run_by_idempotency_key(conn: Connection, workspace_id: str, key: str) -> RunRecord | None:
    row = (
        conn.execute(
            select(scrape_runs).where(
                scrape_runs.c.workspace_id == workspace_id,
                scrape_runs.c.idempotency_key == key,
            )
        )
        .mappings()
        .first()
    )
    return RunRecord.from_row(row) if row else None


def delete_run(conn: Connection, run_id: str) -> None:
    """Remove a request entirely (its workflow never started); the caller owns the transaction."""
    conn.execute(delete(scrape_events).where(scrape_events.c.run_id == run_id))
    conn.execute(delete(scrape_children).where(scrape_children.c.run_id == run_id))
    conn.execute(delete(scrape_runs).where(scrape_runs.c.id == run_id))


def get_children(conn: Connection, run_id: str) -> list[ChildRecord]:
    rows = conn.execute(
        select(scrape_children)
        .where(scrape_children.c.run_id == run_id)
        .order_by(scrape_children.c.idx)
    ).mappings()
    return [ChildRecord.from_row(row) for row in rows]


def get_child(conn: Connection, child_id: str) -> ChildRecord | None:
    row = (
        conn.execute(select(scrape_children).where(scrape_children.c.id == child_id))
        .mappings()
        .first()
    )
    return ChildRecord.from_row(row) if row else None


def get_child_and_run(conn: Connection, child_id: str) -> tuple[ChildRecord, RunRecord] | None:
    """A child and its request, read on one connection (an activity's one trip to a database
    thread instead of two, on the path from a run's end to its first stored row)."""
    child = get_child(conn, child_id)
    run = get_run(conn, child.run_id) if child else None
    return (child, run) if child and run else None


def transition_child(
    conn: Connection,
    child_id: str,
    new_state: ChildState,
    *,
    message: str | None = None,
    platform_run_id: str | None = None,
    dataset_id: str | None = None,
    platform_status: str | None = None,
    status_message: str | None = None,
) -> bool:
    """Move a child to ``new_state`` if its lifecycle allows it, then roll up its header.

    Returns False (and changes nothing) for a transition that is not allowed, such as a
    repeated or stale one: that is what makes the recording activities idempotent.
    """
    child = get_child(conn, child_id)
    if child is None:
        raise LookupError(f"unknown child {child_id}")
    if lock_run_events(conn, child.run_id):
        # We may have waited for another writer: read the child again under the lock.
        child = get_child(conn, child_id) or child
    if not child_transition_allowed(child.state, new_state):
        return False
    now = utcnow()
    values: dict[str, Any] = {"state": new_state.value, "updated_at": now}
    if platform_run_id is not None:
        values["platform_run_id"] = platform_run_id
    if dataset_id is not None:
        values["dataset_id"] = dataset_id
    if platform_status is not None:
        values["platform_status"] = platform_status
    if status_message is not None:
        values["status_message"] = status_message
    if new_state is ChildState.RUNNING and child.started_at is None:
        values["started_at"] = now
    if new_state.terminal:
        values["finished_at"] = now
    conn.execute(update(scrape_children).where(scrape_children.c.id == child_id).values(values))
    data: dict[str, Any] = {"from": child.state.value, "to": new_state.value}
    if platform_status:
        data["platformStatus"] = platform_status
    if status_message:
        data["statusMessage"] = status_message
    append_event(
        conn,
        child.run_id,
        "child.state",
        message or f"actor run {child.idx} ({child.actor}): {child.state} → {new_state}",
        child_id=child_id,
        data=data,
        dedupe_key=f"{child_id}:state:{new_state.value}",
    )
    recompute_run(conn, child.run_id)
    return True


def record_platform_status(
    conn: Connection, child_id: str, platform_status: str, status_message: str | None
) -> None:
    """Remember the latest platform status of a child without changing its state."""
    conn.execute(
        update(scrape_children)
        .where(scrape_children.c.id == child_id)
        .values(platform_status=platform_status, status_message=status_message, updated_at=utcnow())
    )


def merge_usage(
    old_total: float | None,
    old_counts: dict[str, int],
    total: float | None,
    counts: dict[str, int],
) -> tuple[float | None, dict[str, int]]:
    """Usage figures only grow: a read that lags behind an earlier one lowers nothing."""
    if total is None or (old_total is not None and old_total > total):
        total = old_total
    merged = dict(old_counts)
    for event, count in counts.items():
        merged[event] = max(count, merged.get(event, 0))
    return total, merged


def record_usage(
    conn: Connection,
    child_id: str,
    total: float | None,
    counts: dict[str, int],
    *,
    settled: bool = False,
) -> ChildRecord:
    """Record what a read of the platform run said it cost (never lowering a figure); with
    ``settled``, the figure is final from now on. The child after the write."""
    child = get_child(conn, child_id)
    if child is None:
        raise LookupError(f"unknown child {child_id}")
    if child.usage_settled_at is not None:
        return child
    new_total, new_counts = merge_usage(
        child.usage_total_usd, child.charged_event_counts, total, counts
    )
    values: dict[str, Any] = {}
    if new_total != child.usage_total_usd:
        values["usage_total_usd"] = new_total
    if new_counts != child.charged_event_counts:
        values["charged_events_json"] = json.dumps(new_counts, separators=(",", ":"))
    if settled:
        values["usage_settled_at"] = utcnow()
    if values:
        conn.execute(update(scrape_children).where(scrape_children.c.id == child_id).values(values))
    return get_child(conn, child_id) or child


def run_usage_total(conn: Connection, run_id: str) -> float:
    """What a request has cost so far: the sum of its children's figures (one source)."""
    total = conn.execute(
        select(func.coalesce(func.sum(scrape_children.c.usage_total_usd), 0.0)).where(
            scrape_children.c.run_id == run_id
        )
    ).scalar_one()
    return float(total)


def set_ingest_progress(conn: Connection, child_id: str, offset: int) -> None:
    """Record that every item below ``offset`` is stored (the ingest cursor)."""
    conn.execute(
        update(scrape_children)
        .where(scrape_children.c.id == child_id, scrape_children.c.ingest_offset < offset)
        .values(ingest_offset=offset, items_ingested=offset, updated_at=utcnow())
    )


def mark_aborted(conn: Connection, run_id: str) -> bool:
    """Flag a request as aborted by its caller. False if it was already terminal."""
    lock_run_events(conn, run_id)
    run = get_run(conn, run_id)
    if run is None or run.terminal:
        return False
    conn.execute(
        update(scrape_runs).where(scrape_runs.c.id == run_id).values(aborted=1, updated_at=utcnow())
    )
    append_event(
        conn,
        run_id,
        "run.abort_requested",
        "abort requested by the caller",
        dedupe_key=f"{run_id}:abort_requested",
    )
    recompute_run(conn, run_id)
    return True


def recompute_run(conn: Connection, run_id: str) -> RunState:
    """Roll the children up into the header's state, counts and finish time."""
    lock_run_events(conn, run_id)
    run = get_run(conn, run_id)
    if run is None:
        raise LookupError(f"unknown run {run_id}")
    rows = conn.execute(
        select(
            scrape_children.c.state,
            scrape_children.c.input_from_json.is_not(None)
            & scrape_children.c.input_built_at.is_(None),
        ).where(scrape_children.c.run_id == run_id)
    ).all()
    states = [ChildState(state) for state, _ in rows]
    # Chained runs still waiting for their sources' rows (pending, input not built).
    waiting = sum(1 for state, unbuilt in rows if unbuilt and state == ChildState.PENDING)
    new_state = roll_up(states, aborted=run.aborted, waiting=waiting)
    items_total = conn.execute(
        select(func.coalesce(func.sum(scrape_children.c.items_ingested), 0)).where(
            scrape_children.c.run_id == run_id
        )
    ).scalar_one()
    now = utcnow()
    values: dict[str, Any] = {
        "state": new_state.value,
        "children_succeeded": sum(1 for s in states if s is ChildState.SUCCEEDED),
        "children_failed": sum(1 for s in states if s in (ChildState.FAILED, ChildState.TIMED_OUT)),
        "items_total": int(items_total),
        "updated_at": now,
    }
    if states and run_is_terminal(states) and run.finished_at is None:
        values["finished_at"] = now
    conn.execute(update(scrape_runs).where(scrape_runs.c.id == run_id).values(values))
    if new_state is not run.state:
        append_event(
            conn,
            run_id,
            "run.state",
            f"request {run.state} → {new_state}",
            data={"from": run.state.value, "to": new_state.value},
            dedupe_key=f"{run_id}:state:{run.state.value}->{new_state.value}",
        )
    return new_state


def unfinished_run_ids(conn: Connection) -> list[str]:
    """Ids of every request not finished yet (what the drift reconciler looks at)."""
    return list(
        conn.execute(select(scrape_runs.c.id).where(scrape_runs.c.finished_at.is_(None))).scalars()
    )
