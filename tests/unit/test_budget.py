"""The budget split of ``domain.budget``: a table of cases, and the water-filling properties
over many seeded random cases (sum within the budget, nobody above its own cap, nobody
short while a richer child or unspent budget exists)."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from orchestrator.domain.budget import QUANTUM_USD, BudgetTooSmall, split_budget
from orchestrator.domain.errors import ValidationFailed


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
        # A cap finer than 6 decimals is rounded down, never up.
        (10, [0.1234567], [0.123456]),
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


def _micros(amount: float) -> int:
    return int(Decimal(str(amount)) / QUANTUM_USD)


def test_water_filling_properties_hold_over_random_cases() -> None:
    rng = random.Random(20261201)
    checked = 0
    for _ in range(3000):
        count = rng.randint(1, 8)
        budget = round(rng.uniform(0.001, 50), rng.randint(0, 7))
        if budget <= 0:
            continue
        caps: list[float | None] = [
            None if rng.random() < 0.3 else round(rng.uniform(0.000001, 20), rng.randint(0, 7))
            for _ in range(count)
        ]
        caps = [cap if cap is None or cap > 0 else None for cap in caps]
        shares = [_micros(s) for s in split_budget(budget, caps)]
        own = [None if cap is None else _micros(cap) for cap in caps]
        total = _micros(budget)
        assert sum(shares) <= total
        assert all(s > 0 for s in shares)
        assert all(cap is None or s <= cap for s, cap in zip(shares, own, strict=True))
        below_cap = [i for i in range(count) if own[i] is None or shares[i] < (own[i] or 0)]
        if below_cap:
            # Someone could take more: then the budget is spent (to the micro-dollar)...
            assert total - sum(shares) == 0
            # ...and nobody below its cap is short of another child by more than rounding.
            top = max(shares)
            assert all(top - shares[i] <= 1 for i in below_cap)
        checked += 1
    assert checked > 2900
