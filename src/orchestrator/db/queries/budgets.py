"""Spending limits that stop requests: workspace limits, and the check that stops a request
whose own budget or whose workspace's limit is spent (rules in ``domain.spending``).

The check runs in the transaction that records a platform read's usage, so the decision is
made on the figure just stored, and it is stored on the request itself (``stop_reason``):
whichever worker, master or poller looks next finds it there, also after a crash.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, select, update

from orchestrator.db.queries._common import utcnow
from orchestrator.db.queries.events import append_event, lock_run_events
from orchestrator.db.queries.runs import get_run, run_usage_total
from orchestrator.db.queries.usage import workspace_spend
from orchestrator.db.queries.workspaces import ensure_workspace
from orchestrator.db.schema import scrape_runs, workspaces
from orchestrator.domain.spending import (
    BUDGET_EXHAUSTED,
    BudgetPeriod,
    WorkspaceLimit,
    is_exhausted,
    period_bounds,
    request_budget_message,
    workspace_budget_message,
)


@dataclass(frozen=True)
class LimitStatus:
    """A workspace limit and what has been spent against it in the current period."""

    limit: WorkspaceLimit
    period_start: datetime
    period_end: datetime
    spent_usd: float

    @property
    def exhausted(self) -> bool:
        return is_exhausted(self.spent_usd, self.limit.limit_usd)

    @property
    def remaining_usd(self) -> float:
        return max(0.0, self.limit.limit_usd - self.spent_usd)


def get_workspace_limit(conn: Connection, workspace_id: str) -> WorkspaceLimit | None:
    row = conn.execute(
        select(workspaces.c.budget_usd, workspaces.c.budget_period).where(
            workspaces.c.id == workspace_id
        )
    ).first()
    if row is None or row.budget_usd is None or row.budget_period is None:
        return None
    return WorkspaceLimit(workspace_id, float(row.budget_usd), BudgetPeriod(row.budget_period))


def set_workspace_limit(
    conn: Connection,
    workspace_id: str,
    limit_usd: float | None,
    period: BudgetPeriod | None,
    new_nonce: Callable[[], str],
) -> None:
    """Give the workspace a limit (creating its row if need be), or none (both None)."""
    ensure_workspace(conn, workspace_id, new_nonce)
    conn.execute(
        update(workspaces)
        .where(workspaces.c.id == workspace_id)
        .values(budget_usd=limit_usd, budget_period=period.value if period else None)
    )


def limit_status(
    conn: Connection, workspace_id: str, now: datetime | None = None
) -> LimitStatus | None:
    """The workspace's limit and its spend this period; None without a limit."""
    limit = get_workspace_limit(conn, workspace_id)
    if limit is None:
        return None
    start, end = period_bounds(limit.period, now or utcnow())
    spent = workspace_spend(conn, workspace_id, start, end)
    return LimitStatus(limit, start, end, spent)


def enforce_budgets(conn: Connection, run_id: str) -> str | None:
    """Stop the request if its budget or its workspace's limit is spent; its stop reason
    (set now or earlier), or None while it may go on. A finished request is left alone."""
    lock_run_events(conn, run_id)  # before any row write; see events.py
    run = get_run(conn, run_id)
    if run is None or run.stop_reason is not None or run.terminal:
        return run.stop_reason if run is not None else None
    if run.budget_usd is not None:
        spent = run_usage_total(conn, run_id)
        if is_exhausted(spent, run.budget_usd):
            message = request_budget_message(run.budget_usd, spent)
            data = {"budget": "request", "limitUsd": run.budget_usd, "spentUsd": spent}
            return _stop(conn, run_id, message, data)
    status = limit_status(conn, run.workspace_id)
    if status is not None and status.exhausted:
        message = workspace_budget_message(status.limit, status.spent_usd)
        data = {
            "budget": "workspace",
            "period": status.limit.period.value,
            "limitUsd": status.limit.limit_usd,
            "spentUsd": status.spent_usd,
        }
        return _stop(conn, run_id, message, data)
    return None


def _stop(conn: Connection, run_id: str, message: str, data: dict[str, object]) -> str:
    conn.execute(
        update(scrape_runs)
        .where(scrape_runs.c.id == run_id, scrape_runs.c.stop_reason.is_(None))
        .values(stop_reason=BUDGET_EXHAUSTED, stop_message=message, updated_at=utcnow())
    )
    append_event(
        conn,
        run_id,
        "run.budget_exhausted",
        message,
        data={"reason": BUDGET_EXHAUSTED, **data},
        dedupe_key=f"{run_id}:budget_exhausted",
    )
    return BUDGET_EXHAUSTED
