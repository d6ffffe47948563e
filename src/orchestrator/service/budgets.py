"""Workspace spending limits: set and read by operators (``/workspaces/{id}/budget``), and
checked when a request is submitted (``402 budget-exhausted``). Running requests are
stopped by the poll that records the spend (``db.queries.budgets.enforce_budgets``)."""

from __future__ import annotations

from sqlalchemy import Connection

from orchestrator.db.queries import budgets as budget_queries
from orchestrator.domain.errors import NotFound
from orchestrator.domain.spending import (
    BudgetPeriod,
    WorkspaceBudgetExhausted,
    check_limit,
)
from orchestrator.security.callback_secrets import new_nonce
from orchestrator.service.auth import Principal


def _visible(workspace_id: str, caller: Principal) -> None:
    if not caller.may_see(workspace_id):
        raise NotFound(f"workspace {workspace_id} does not exist", field="workspaceId")


def workspace_budget(
    conn: Connection, workspace_id: str, *, caller: Principal
) -> budget_queries.LimitStatus | None:
    """The workspace's limit and this period's spend (None: no limit)."""
    _visible(workspace_id, caller)
    return budget_queries.limit_status(conn, workspace_id)


def set_workspace_budget(
    conn: Connection, workspace_id: str, limit_usd: float, period: BudgetPeriod
) -> budget_queries.LimitStatus:
    """Give the workspace a limit per period (operators only; the route checks the key).
    It applies at once: requests already running are stopped by their next poll if the
    workspace is over it."""
    check_limit(limit_usd)
    budget_queries.set_workspace_limit(conn, workspace_id, limit_usd, period, new_nonce)
    status = budget_queries.limit_status(conn, workspace_id)
    assert status is not None
    return status


def clear_workspace_budget(conn: Connection, workspace_id: str) -> None:
    budget_queries.set_workspace_limit(conn, workspace_id, None, None, new_nonce)


def refuse_if_exhausted(conn: Connection, workspace_id: str) -> None:
    """A request may not start while its workspace has spent its limit for the period."""
    status = budget_queries.limit_status(conn, workspace_id)
    if status is not None and status.exhausted:
        raise WorkspaceBudgetExhausted(
            f"{status.limit.describe()} is spent (${status.spent_usd:.6f} since "
            f"{status.period_start:%Y-%m-%d}); new requests are refused until "
            f"{status.period_end:%Y-%m-%dT%H:%MZ} or until an operator raises the limit"
        )
