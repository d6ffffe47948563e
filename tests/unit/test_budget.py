"""The budget split of ``domain.budget``: a table of cases, and the water-filling properties
over many seeded random cases (sum within the budget, nobody above its own cap, nobody
short while a richer child or unspent budget exists)."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from orchestrator.domain.budget import BudgetTooSmall, split_budget
from orchestrator.domain.errors import ValidationFailed
from orchestrator.service.commands import ActorRun, SubmitRequest
from orchestrator.service.submission import SubmissionPolicy, validate_request


@pytest.mark.parametrize(
    ("budget", "caps", "expected"),
    [
        (10, [None, None], [5, 5]),
        # The documented example: the small cap is kept, the rest is shared equally.
        (10, [1, None, 20], [1, 4.5, 4.5]),
        # Caps that add up to less than the budget are all kept (the rest is unspent).
        (100, [1, 2], [1, 2]),
        # Rounded down to 6 decimals; the remainder goes to the child filled last.
        (1, [None, None, None], [0.333333, 0.333333, 0.333334]),
        # A cap just above the equal share is kept only up to the share.
        (1, [0.4, None, 0.2], [0.4, 0.4, 0.2]),
        # Decimal amounts are taken as written (0.3 is 300000 micro-dollars, not less).
        (0.3, [None, None], [0.15, 0.15]),
        # A kept cap is kept exactly, even finer than 6 decimals (it is reserved rounded up).
        (10, [0.1234567, None], [0.1234567, 9.876543]),
        (1, [5e-324, None], [5e-324, 0.999999]),
        (0.000001, [None], [0.000001]),
    ],
)
def test_the_split_table(budget: float, caps: list[float | None], expected: list[float]) -> None:
    assert split_budget(budget, caps) == expected


def test_a_budget_too_small_for_a_share_per_child_names_the_budget() -> None:
    with pytest.raises(BudgetTooSmall) as raised:
        split_budget(0.000002, [None, None, None])
    assert raised.value.field == "/budgetUsd"
    assert "too small" in raised.value.detail and "3 actor run(s)" in raised.value.detail
    assert raised.value.code == "validation-failed"


@pytest.mark.parametrize("budget", [0, -1, float("inf"), float("nan")])
def test_a_budget_that_is_not_a_positive_amount_is_refused(budget: float) -> None:
    with pytest.raises(ValidationFailed) as raised:
        split_budget(budget, [None])
    assert raised.value.field == "/budgetUsd"


def _exact(amount: float) -> Decimal:
    return Decimal(str(amount))


def test_water_filling_properties_hold_over_random_cases() -> None:
    rng = random.Random(20261201)
    quantum = Decimal("0.000001")
    for _ in range(3000):
        count = rng.randint(1, 8)
        budget = round(rng.uniform(0.000001 * count, 50), rng.randint(6, 8))
        caps: list[float | None] = [
            None if rng.random() < 0.3 else round(rng.uniform(1e-7, 20), rng.randint(0, 8)) or 1.0
            for _ in range(count)
        ]
        shares = split_budget(budget, caps)
        exact = [_exact(s) for s in shares]
        assert sum(exact) <= _exact(budget)
        assert all(s > 0 for s in exact)
        assert all(cap is None or s <= _exact(cap) for s, cap in zip(exact, caps, strict=True))
        below_cap = [i for i, cap in enumerate(caps) if cap is None or exact[i] < _exact(cap)]
        if below_cap:
            # Someone could take more: then what is left unspent is less than one
            # micro-dollar per child kept at its cap (their reservations round up)...
            kept = count - len(below_cap)
            assert _exact(budget) - sum(exact) < quantum * (kept + 1)
            # ...and nobody below its cap is short of another child by more than rounding.
            top = max(exact)
            assert all(top - exact[i] <= quantum for i in below_cap)


def test_the_service_refuses_a_non_positive_budget_from_callers_other_than_the_api() -> None:
    command = SubmitRequest(runs=(ActorRun(actor="a"),), budget_usd=0.0)
    with pytest.raises(ValidationFailed) as raised:
        validate_request(command, SubmissionPolicy())
    assert raised.value.field == "/budgetUsd"
