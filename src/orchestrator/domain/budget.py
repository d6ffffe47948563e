"""Splitting a request's budget (``budgetUsd``) across its actor runs before they start.

The rule (water-filling with floors): each child has its own effective
``maxTotalChargeUsd`` (the caller's option, else the registry default, within the actor's
hard cap; None = uncapped), its *cap*, and the platform's minimum charge for its actor at its
memory (``domain.pricing.minimum_charge_usd``; 0 for most actors), its *floor*. A *level* is
chosen, and every child gets ``clamp(level, floor, cap)``: children whose cap is below the
level keep their cap, children whose floor is above it get their floor, and the rest share
what is left equally. The level is the largest one whose shares add up to no more than the
budget. So the children's charge limits never add up to more than the budget, no child is
given more than it could spend anyway, and none is given a limit the platform would refuse.

Example: a budget of 10 USD over three children capped at 1, None and 20 USD. The equal
share is 3.33…; the first child keeps 1, leaving 9 for the other two: 4.5 each (both below
their own caps), so the limits are 1, 4.5 and 4.5. With floors: 1 USD over three uncapped
children, one of which needs at least 0.5 USD: it gets 0.5, the others 0.25 each.

A budget smaller than the children's floors added up is refused (:class:`BudgetTooSmall`,
naming ``/budgetUsd``, saying the least total and which actors need what): the platform
would refuse a child's start (``max-total-charge-usd-below-minimum``). A floor is never
below one micro-dollar either: the platform refuses a ``maxTotalChargeUsd`` of 0, so a budget
of at least 0.000001 USD per child (plus the minimum charges) is always accepted.

Shares are whole micro-dollars (6 decimals, finer than any platform price), rounded
*down*; a cap that is kept is kept exactly, and counts against the budget rounded *up*; a
floor is rounded *up* (a share is never below its minimum), so the sum never exceeds the
budget. The children are ordered from the smallest own cap up, uncapped last, and the few
micro-dollars of an uneven split go to the last ones that can take more (1 USD over three
uncapped children: 0.333333, 0.333333, 0.333334).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

from orchestrator.domain.errors import ValidationFailed

#: Amounts are whole multiples of this many USD (the split's resolution).
QUANTUM_USD = Decimal("0.000001")

FIELD = "/budgetUsd"


class BudgetTooSmall(ValidationFailed):
    """A budget that cannot give every actor run a share at or above its floor."""


def _micros(amount: float, rounding: str = ROUND_FLOOR) -> int:
    # Through str() so 0.3 is 300000 micro-dollars, not a binary fraction below it.
    return int((Decimal(str(amount)) / QUANTUM_USD).to_integral_value(rounding=rounding))


def _usd(micros: int) -> float:
    return float(Decimal(micros) * QUANTUM_USD)


def check_budget(budget_usd: float) -> None:
    """Refuse a budget that is not a finite amount above 0 (naming ``/budgetUsd``)."""
    if not (math.isfinite(budget_usd) and budget_usd > 0):
        raise ValidationFailed(f"budgetUsd must be greater than 0 (got {budget_usd})", field=FIELD)


def split_budget(
    budget_usd: float,
    caps: Sequence[float | None],
    floors: Sequence[float] | None = None,
    *,
    names: Sequence[str] | None = None,
) -> list[float]:
    """Each child's ``maxTotalChargeUsd`` under the budget, in the order of ``caps``.

    ``caps`` are the children's own effective limits (None = uncapped; else above 0),
    ``floors`` their minimum charges (default 0; each at most its cap), ``names`` what to
    call them in the refusal (default ``run <index>``). The result is ``clamp(level, floor,
    cap)`` per child, with the largest level (a whole number of :data:`QUANTUM_USD`) whose
    total stays within the budget; a kept cap is returned as given. Raises
    :class:`BudgetTooSmall` when the budget is below the floors added up.
    """
    check_budget(budget_usd)
    floors = [0.0] * len(caps) if floors is None else list(floors)
    if len(floors) != len(caps):
        raise ValueError("one floor per cap")
    budget = _micros(budget_usd)
    # Each child's range in micro-dollars: its floor rounded up (at least one), and its cap
    # rounded up, the amount a kept cap reserves (None = no upper end).
    low = [max(1, _micros(floor, ROUND_CEILING)) for floor in floors]
    high = [None if cap is None else _micros(cap, ROUND_CEILING) for cap in caps]
    for index, (cap, floor) in enumerate(zip(caps, floors, strict=True)):
        if cap is not None and not (cap > 0 and cap >= floor):
            raise ValueError(f"child {index}: cap {cap} is not above 0 and its floor {floor}")
    if sum(low) > budget:
        raise _too_small(budget_usd, floors, low, names)

    def at(level: int, index: int) -> int:
        upper = high[index]
        share = max(level, low[index])
        return share if upper is None else min(share, upper)

    def total(level: int) -> int:
        return sum(at(level, index) for index in range(len(caps)))

    # The largest level whose total fits (total() never falls as the level rises).
    fits, beyond = 0, budget + max((h for h in high if h is not None), default=0) + 1
    while beyond - fits > 1:
        middle = (fits + beyond) // 2
        fits, beyond = (middle, beyond) if total(middle) <= budget else (fits, middle)
    micros = [at(fits, index) for index in range(len(caps))]
    # What is left is less than one micro-dollar per child that could take one more (else
    # the level would be higher): those go to the last such children in the fill order.
    left = budget - sum(micros)
    order = sorted(range(len(caps)), key=lambda i: (caps[i] is None, caps[i] or 0.0))
    for index in reversed(order):
        if left == 0:
            break
        if at(fits + 1, index) > micros[index]:
            micros[index] += 1
            left -= 1
    return [
        cap if cap is not None and reserved is not None and share >= reserved else _usd(share)
        for cap, reserved, share in zip(caps, high, micros, strict=True)
    ]


def _too_small(
    budget_usd: float, floors: Sequence[float], low: Sequence[int], names: Sequence[str] | None
) -> BudgetTooSmall:
    least = _usd(sum(low))
    needs = [
        f"{names[index] if names else f'run {index}'}: {floor:g} USD"
        for index, floor in enumerate(floors)
        if floor > 0
    ]
    if not needs:
        return BudgetTooSmall(
            f"budgetUsd {budget_usd} is too small to split across {len(low)} actor "
            f"run(s): each needs a maxTotalChargeUsd of at least {QUANTUM_USD} USD",
            field=FIELD,
        )
    return BudgetTooSmall(
        f"budgetUsd {budget_usd} is too small for the platform's minimum charge of these "
        f"{len(low)} actor run(s): it must be at least {least:g} USD ({'; '.join(needs)})",
        field=FIELD,
    )
