"""The rules of spending limits (``domain.spending``): periods, exhaustion, messages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from orchestrator.domain.errors import ValidationFailed
from orchestrator.domain.spending import (
    BudgetPeriod,
    WorkspaceLimit,
    check_limit,
    is_exhausted,
    period_bounds,
    workspace_budget_message,
)


@pytest.mark.parametrize(
    ("period", "now", "start", "end"),
    [
        (
            BudgetPeriod.DAY,
            datetime(2026, 12, 1, 13, 5, tzinfo=UTC),
            datetime(2026, 12, 1, tzinfo=UTC),
            datetime(2026, 12, 2, tzinfo=UTC),
        ),
        (
            BudgetPeriod.MONTH,
            datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC),
            datetime(2026, 12, 1, tzinfo=UTC),
            datetime(2027, 1, 1, tzinfo=UTC),
        ),
        (
            BudgetPeriod.MONTH,
            datetime(2028, 2, 29, 12, tzinfo=UTC),
            datetime(2028, 2, 1, tzinfo=UTC),
            datetime(2028, 3, 1, tzinfo=UTC),
        ),
        # Periods are UTC: 01:00 on the 1st in UTC+2 is still the previous UTC month.
        (
            BudgetPeriod.MONTH,
            datetime(2026, 3, 1, 1, tzinfo=timezone(timedelta(hours=2))),
            datetime(2026, 2, 1, tzinfo=UTC),
            datetime(2026, 3, 1, tzinfo=UTC),
        ),
    ],
)
def test_periods_are_utc_calendar_days_and_months(
    period: BudgetPeriod, now: datetime, start: datetime, end: datetime
) -> None:
    assert period_bounds(period, now) == (start, end)


def test_a_limit_is_exhausted_once_the_spend_reaches_it() -> None:
    assert not is_exhausted(0.999999, 1.0)
    assert is_exhausted(1.0, 1.0)
    assert is_exhausted(0.1 + 0.2, 0.3)  # float noise below a micro-dollar is not a margin
    assert is_exhausted(5.0, 1.0)
    assert not is_exhausted(1e9, None)
    assert not is_exhausted(12.5, 1e300) and is_exhausted(1e300, 1e300)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_a_limit_must_be_a_positive_amount(bad: float) -> None:
    with pytest.raises(ValidationFailed) as raised:
        check_limit(bad)
    assert raised.value.field == "/limitUsd"


def test_the_message_names_the_workspace_and_its_period() -> None:
    limit = WorkspaceLimit("ws_acme", 50.0, BudgetPeriod.MONTH)
    assert workspace_budget_message(limit, 50.25) == (
        "stopped: workspace ws_acme's monthly budget of $50.00 is spent ($50.250000 this period)"
    )
