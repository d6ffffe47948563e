"""What capacity admission reads and writes: children's workspace, memory and state, the
``queued`` marks, and the per-workspace concurrency limits."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Connection, select, update

from orchestrator.db.queries._common import utcnow
from orchestrator.db.queries.events import append_event, lock_run_events
from orchestrator.db.queries.runs import get_child, recompute_run, transition_child
from orchestrator.db.schema import scrape_children, scrape_runs, workspaces
from orchestrator.domain.lifecycle import ChildState

#: Children whose platform run holds (or is about to hold) a slot of the account. An
#: ``ingesting`` child's run has ended: its slot is free on the platform, so it holds none.
LIVE_STATES = (ChildState.SPAWNING, ChildState.RUNNING)
WAITING_MESSAGE = "waiting for a platform slot"


@dataclass(frozen=True)
class ChildFacts:
    child_id: str
    workspace_id: str
    state: ChildState
    #: ``memoryMb`` of its options (the catalog's default is merged into them), if any.
    memory_mb: int | None
    has_platform_run: bool


def _facts(rows: Iterable[tuple[str, str, str, str, str | None]]) -> list[ChildFacts]:
    out: list[ChildFacts] = []
    for cid, ws, state, options_json, platform_run_id in rows:
        memory = json.loads(options_json or "{}").get("memoryMb")
        out.append(
            ChildFacts(
                cid,
                ws,
                ChildState(state),
                int(memory) if memory else None,
                platform_run_id is not None,
            )
        )
    return out


def _facts_of(conn: Connection, which: ColumnElement[bool]) -> list[ChildFacts]:
    """Workspace, state and memory of the children ``which`` selects."""
    query = select(
        scrape_children.c.id,
        scrape_runs.c.workspace_id,
        scrape_children.c.state,
        scrape_children.c.options_json,
        scrape_children.c.platform_run_id,
    ).join(scrape_runs, scrape_runs.c.id == scrape_children.c.run_id)
    return _facts(conn.execute(query.where(which)))


def children_facts(conn: Connection, child_ids: list[str]) -> list[ChildFacts]:
    """Workspace, state and memory of these children (unknown ids are left out)."""
    if not child_ids:
        return []
    return _facts_of(conn, scrape_children.c.id.in_(child_ids))


def live_children(conn: Connection) -> list[ChildFacts]:
    """Every child being started, running on the platform, or ingesting."""
    return _facts_of(conn, scrape_children.c.state.in_([s.value for s in LIVE_STATES]))


def mark_queued(conn: Connection, child_ids: list[str]) -> int:
    """``pending`` → ``queued`` for each child (any other state is left alone); how many."""
    marked = 0
    for cid in child_ids:
        child = get_child(conn, cid)
        if child is None or child.state is not ChildState.PENDING:
            continue
        if transition_child(
            conn,
            cid,
            ChildState.QUEUED,
            message=f"actor run {child.idx} ({child.actor}): {WAITING_MESSAGE}",
        ):
            marked += 1
    return marked


def requeue_child(conn: Connection, child_id: str, reason: str) -> bool:
    """A start refused for capacity: ``spawning`` with no platform run goes back to
    ``queued`` (the one backward move of the lifecycle; nothing reached the platform).
    False, changing nothing, for a child in any other condition."""
    child = get_child(conn, child_id)
    if child is None:
        return False
    lock_run_events(conn, child.run_id)
    done = conn.execute(
        update(scrape_children)
        .where(
            scrape_children.c.id == child_id,
            scrape_children.c.state == ChildState.SPAWNING.value,
            scrape_children.c.platform_run_id.is_(None),
        )
        .values(state=ChildState.QUEUED.value, updated_at=utcnow())
    ).rowcount
    if not done:
        return False
    append_event(
        conn,
        child.run_id,
        "child.requeued",
        f"actor run {child.idx} ({child.actor}): the platform refused the start for "
        f"capacity ({reason}); {WAITING_MESSAGE}",
        child_id=child_id,
        data={"from": ChildState.SPAWNING.value, "to": ChildState.QUEUED.value, "type": reason},
    )
    recompute_run(conn, child.run_id)
    return True


def workspace_concurrency_limits(conn: Connection) -> dict[str, int]:
    """Every workspace's operator-set concurrency limit (workspaces without one are absent)."""
    rows = conn.execute(
        select(workspaces.c.id, workspaces.c.max_concurrent_runs).where(
            workspaces.c.max_concurrent_runs.is_not(None)
        )
    )
    return {ws: int(limit) for ws, limit in rows}
