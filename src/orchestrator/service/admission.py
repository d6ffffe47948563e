"""Capacity admission as the API and CLI see it: operators' per-workspace concurrency
limits, and the admission workflow's view (queue positions, snapshot) read by queries.

Reads of the workflow are best effort: without Temporal, or when the workflow does not
exist yet, a position is simply not shown."""

from __future__ import annotations

import logging

from sqlalchemy import Connection
from temporalio.client import Client

from orchestrator.db.queries import workspaces as workspace_queries
from orchestrator.domain.admission import Snapshot
from orchestrator.domain.errors import ValidationFailed
from orchestrator.domain.ids import admission_workflow_id
from orchestrator.security.callback_secrets import new_nonce
from orchestrator.workflows.admission_types import (
    QUEUE_POSITIONS_QUERY,
    REFRESH_SIGNAL,
    SNAPSHOT_QUERY,
)

log = logging.getLogger(__name__)

#: The most an operator may set (far above any account's concurrency).
MAX_CONCURRENCY_LIMIT = 100_000


def concurrency_limit(conn: Connection, workspace_id: str) -> int | None:
    return workspace_queries.get_concurrency_limit(conn, workspace_id)


def set_concurrency_limit(conn: Connection, workspace_id: str, limit: int | None) -> None:
    """Set (or, with None, clear) the most platform runs the workspace may hold at once."""
    if limit is not None and not 0 <= limit <= MAX_CONCURRENCY_LIMIT:
        raise ValidationFailed(
            f"maxConcurrentRuns must be between 0 and {MAX_CONCURRENCY_LIMIT}",
            field="maxConcurrentRuns",
        )
    workspace_queries.set_concurrency_limit(conn, workspace_id, limit, new_nonce)


async def refresh_admission(temporal: Client | None, task_queue: str) -> None:
    """Tell the admission workflow to read the limits again now (best effort: one that
    does not exist yet reads them when it starts, and the timer reads them anyway)."""
    if temporal is None:
        return
    try:
        await temporal.get_workflow_handle(admission_workflow_id(task_queue)).signal(REFRESH_SIGNAL)
    except Exception as exc:
        log.info("admission workflow not told to refresh: %s", exc)


async def queue_positions(
    temporal: Client | None, task_queue: str, child_ids: list[str]
) -> dict[str, int]:
    """Positions (1 = next) of those children that wait for a slot; {} when unknown."""
    if temporal is None or not child_ids:
        return {}
    try:
        positions: dict[str, int] = await temporal.get_workflow_handle(
            admission_workflow_id(task_queue)
        ).query(QUEUE_POSITIONS_QUERY, child_ids, result_type=dict[str, int])
    except Exception as exc:
        log.info("queue positions not read: %s", exc)
        return {}
    return positions


async def admission_snapshot(temporal: Client, task_queue: str) -> Snapshot:
    """Capacity, use and waiting tickets per workspace, as the admission workflow holds them."""
    snap: Snapshot = await temporal.get_workflow_handle(admission_workflow_id(task_queue)).query(
        SNAPSHOT_QUERY, result_type=Snapshot
    )
    return snap
