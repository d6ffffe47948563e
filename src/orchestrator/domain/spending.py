"""Spending limits that stop requests while they run: the request's own ``budgetUsd`` and
its workspace's daily or monthly limit.

The rules:

- A limit is *exhausted* once the spend reaches it (``spent >= limit``, compared in whole
  micro-dollars, the resolution of every figure we store). Spend only grows, so an exhausted
  limit stays exhausted.
- A request's spend is the sum of its children's ``usageTotalUsd``; a workspace's spend in
  a period is the sum over its children booked in that period, booked as the usage report
  books them (on the UTC day the run finished, or started while it still runs).
- Periods are UTC calendar days and months: a monthly limit starts afresh at 00:00 UTC on
  the 1st.
- A request stopped by a limit keeps the reason ``budget-exhausted`` (one reason for both
  limits; the message says which), and every child still live is stopped the way a caller's
  abort stops it, rows kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from enum import StrEnum

from orchestrator.domain.errors import DomainError, ValidationFailed

#: The stop reason of a request stopped by its own or its workspace's budget.
BUDGET_EXHAUSTED = "budget-exhausted"

_MICROS = 1_000_000


class BudgetPeriod(StrEnum):
    DAY = "day"
    MONTH = "month"


class WorkspaceBudgetExhausted(DomainError):
    """A request submitted while its workspace has spent its limit for the period."""

    code = BUDGET_EXHAUSTED
    title = "The workspace's budget is exhausted"


def _micros(amount: float) -> int:
    # Through Decimal: exact for any finite float, however large (a budget of 1e300 is valid).
    return int((Decimal(str(amount)) * _MICROS).to_integral_value(ROUND_HALF_EVEN))


def is_exhausted(spent_usd: float, limit_usd: float | None) -> bool:
    """Whether a spend has reached its limit (None: no limit)."""
    return limit_usd is not None and _micros(spent_usd) >= _micros(limit_usd)


def check_limit(limit_usd: float) -> None:
    """Refuse a workspace limit that is not a finite amount above 0."""
    if not (math.isfinite(limit_usd) and limit_usd > 0):
        raise ValidationFailed(
            f"limitUsd must be greater than 0 (got {limit_usd})", field="/limitUsd"
        )


def period_bounds(period: BudgetPeriod, now: datetime) -> tuple[datetime, datetime]:
    """The UTC period containing ``now``: [start, end)."""
    now = now.astimezone(UTC)
    if period is BudgetPeriod.DAY:
        start = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return start, start + timedelta(days=1)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    year, month = (start.year + 1, 1) if start.month == 12 else (start.year, start.month + 1)
    return start, start.replace(year=year, month=month)


@dataclass(frozen=True)
class WorkspaceLimit:
    workspace_id: str
    limit_usd: float
    period: BudgetPeriod

    def describe(self) -> str:
        adjective = "daily" if self.period is BudgetPeriod.DAY else "monthly"
        return f"workspace {self.workspace_id}'s {adjective} budget of ${self.limit_usd:.2f}"


def request_budget_message(budget_usd: float, spent_usd: float) -> str:
    return f"stopped: the request's budget of ${budget_usd:.6f} is spent (${spent_usd:.6f} so far)"


def workspace_budget_message(limit: WorkspaceLimit, spent_usd: float) -> str:
    return f"stopped: {limit.describe()} is spent (${spent_usd:.6f} this period)"
