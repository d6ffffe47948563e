"""What the metrics read from the database: requests and children by state, queues by workspace.

Counted at scrape time (``observability.collectors``), grouped by whatever states are stored,
so a state added to the lifecycle shows up without a change here. Each is one aggregate
statement; ``ix_scrape_runs_state`` serves the first, the others scan the children (the
collector caches the figures for a few seconds so several scrapers do not multiply that).
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from sqlalchemy import Connection, func, select

from orchestrator.db.queries._common import as_utc
from orchestrator.db.schema import scrape_children, scrape_events, scrape_runs

#: The child state of a child waiting for a capacity slot (issue 14's admission); spelled
#: here rather than imported so this query works before and after that state exists.
QUEUED_CHILD_STATE: Final = "queued"


def requests_by_state(conn: Connection) -> dict[str, int]:
    """Request headers by state."""
    rows = conn.execute(
        select(scrape_runs.c.state, func.count()).group_by(scrape_runs.c.state)
    ).all()
    return {state: count for state, count in rows}


def children_by_state(conn: Connection) -> dict[str, int]:
    """Child actor runs by state."""
    rows = conn.execute(
        select(scrape_children.c.state, func.count()).group_by(scrape_children.c.state)
    ).all()
    return {state: count for state, count in rows}


def queued_children_by_workspace(conn: Connection) -> dict[str, int]:
    """Children waiting for capacity, by workspace (the queue length of each workspace)."""
    rows = conn.execute(
        select(scrape_runs.c.workspace_id, func.count())
        .select_from(
            scrape_children.join(scrape_runs, scrape_children.c.run_id == scrape_runs.c.id)
        )
        .where(scrape_children.c.state == QUEUED_CHILD_STATE)
        .group_by(scrape_runs.c.workspace_id)
    ).all()
    return {workspace: count for workspace, count in rows}


def child_entered(conn: Connection, child_id: str, state: str) -> datetime | None:
    """When a child moved to ``state`` (its one-off transition event), if it did."""
    value = conn.execute(
        select(scrape_events.c.created_at).where(
            scrape_events.c.dedupe_key == f"{child_id}:state:{state}"
        )
    ).scalar()
    return as_utc(value)
