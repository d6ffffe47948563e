"""The budget split with floors (each child's minimum charge): a table of cases, the refusal
of a budget below the floors, and the properties over many seeded random cases (sum within
the budget, each share within [floor, cap], deterministic, nobody short while budget is
left that it could take)."""

from __future__ import annotations

import random
from decimal import ROUND_CEILING, Decimal

import pytest

from orchestrator.domain.budget import BudgetTooSmall, split_budget

QUANTUM = Decimal("0.000001")


@pytest.mark.parametrize(
    ("budget", "caps", "floors", "expected"),
    [
        # The documented example: one child needs 0.5, the other two share the rest.
        (1, [None, None, None], [0.5, 0, 0], [0.5, 0.25, 0.25]),
        # A floor below the equal share changes nothing.
        (10, [1, None, 20], [0.02, 0.02, 0.02], [1, 4.5, 4.5]),
        # Exactly the floors added up: everyone at its floor.
        (0.04, [None, 100], [0.02, 0.02], [0.02, 0.02]),
        # A floor and a cap together: the capped child keeps its cap, the floored one its floor.
        (1, [0.1, None, None], [0, 0.6, 0], [0.1, 0.6, 0.3]),
        # A floor equal to the cap is the child's only possible share.
        (5, [0.3, None], [0.3, 0], [0.3, 4.7]),
        # A floor finer than a micro-dollar is rounded up (a share is never below it).
        (0.01, [None, None], [0.0000015, 0], [0.005, 0.005]),
        (0.000003, [None, None], [0.0000015, 0], [0.000002, 0.000001]),
    ],
)
def test_the_split_table_with_floors(
    budget: float, caps: list[float | None], floors: list[float], expected: list[float]
) -> None:
    assert split_budget(budget, caps, floors) == expected


def test_a_budget_below_the_floors_names_the_budget_the_least_total_and_who_needs_what() -> None:
    with pytest.raises(BudgetTooSmall) as raised:
        split_budget(0.03, [None, 100, None], [0.02, 0.02, 0], names=["leadgen", "b", "free"])
    error = raised.value
    assert error.field == "/budgetUsd" and error.code == "validation-failed"
    # 0.02 + 0.02 + one micro-dollar for the run without a minimum.
    assert "at least 0.040001 USD" in error.detail
    assert "leadgen: 0.02 USD" in error.detail and "b: 0.02 USD" in error.detail
    assert "free" not in error.detail  # no minimum of its own
    # One micro-dollar more than the floors is enough.
    assert split_budget(0.040001, [None, 100, None], [0.02, 0.02, 0]) == [0.02, 0.02, 0.000001]


def test_a_cap_below_its_floor_is_a_caller_error() -> None:
    for cap in (0.01, 0.0):
        with pytest.raises(ValueError, match="not above 0 and its floor"):
            split_budget(10, [cap], [0.02 if cap else 0.0])
    with pytest.raises(ValueError, match="one floor per cap"):
        split_budget(10, [None, None], [0.02])


def _exact(amount: float) -> Decimal:
    return Decimal(str(amount))


def test_floored_water_filling_properties_hold_over_random_cases() -> None:
    rng = random.Random(20261202)
    refused = 0
    for _ in range(3000):
        count = rng.randint(1, 8)
        floors = [0.0 if rng.random() < 0.4 else round(rng.uniform(0, 2), 6) for _ in range(count)]
        caps: list[float | None] = [
            None
            if rng.random() < 0.3
            else floor + max(1e-7, round(rng.uniform(0, 10), rng.randint(0, 8)))
            for floor in floors
        ]
        budget = round(rng.uniform(0.000001 * count, 30), rng.randint(6, 8))
        low = [max(QUANTUM, _exact(f).quantize(QUANTUM, rounding=ROUND_CEILING)) for f in floors]
        if sum(low) > _exact(budget):
            with pytest.raises(BudgetTooSmall):
                split_budget(budget, caps, floors)
            refused += 1
            continue
        shares = split_budget(budget, caps, floors)
        assert split_budget(budget, caps, floors) == shares  # deterministic
        exact = [_exact(s) for s in shares]
        assert sum(exact) <= _exact(budget)
        for share, floor, cap in zip(exact, floors, caps, strict=True):
            assert share > 0 and share >= _exact(floor)
            assert cap is None or share <= _exact(cap)
        # Everyone strictly inside its range is at the common level (within rounding), and
        # no child above its floor has less than one below its cap.
        free = [
            i
            for i, (s, cap) in enumerate(zip(exact, caps, strict=True))
            if s > low[i] and (cap is None or s < _exact(cap))
        ]
        short = [i for i, cap in enumerate(caps) if cap is None or exact[i] < _exact(cap)]
        if free:
            level = min(exact[i] for i in free)
            assert all(exact[i] - level <= QUANTUM for i in free)
            assert all(exact[i] >= level for i in short)
        if short:
            # Budget left over is less than a micro-dollar per child that could take more,
            # plus one per kept cap (their reservations round up).
            kept = count - len(short)
            assert _exact(budget) - sum(exact) < QUANTUM * (len(short) + kept + 1)
    assert 0 < refused < 3000  # both branches were exercised
