"""Splitting a request's budget (``budgetUsd``) across its actor runs before they start.

The rule (water-filling): each child has its own effective ``maxTotalChargeUsd`` (the
caller's option, else the registry default, within the actor's hard cap; None = uncapped).
A *level* is chosen, and every child gets ``min(own cap, level)``: children whose own cap is
below the equal share keep their cap, and what they leave is split equally among the rest.
So the children's charge limits never add up to more than the budget, and no child is
given more than it could spend anyway.

Example: a budget of 10 USD over three children capped at 1, None and 20 USD. The equal
share is 3.33…; the first child keeps 1, leaving 9 for the other two: 4.5 each (both below
their own caps), so the limits are 1, 4.5 and 4.5.

Shares are whole micro-dollars (6 decimals, finer than any platform price), rounded
*down*; a cap that is kept is kept exactly, and counts against the budget rounded *up*, so
the sum never exceeds the budget. The children are filled from the smallest own cap up,
uncapped last, so the few micro-dollars of an uneven split go to the last ones (1 USD over
three uncapped children: 0.333333, 0.333333, 0.333334). A budget whose share for some
child would round to 0 is refused (the platform refuses a ``maxTotalChargeUsd`` of 0); a
budget of at least 0.000001 USD per child never is.
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
    """A budget that cannot give every actor run a share above 0."""


def _micros(amount: float, rounding: str = ROUND_FLOOR) -> int:
    # Through str() so 0.3 is 300000 micro-dollars, not a binary fraction below it.
    return int((Decimal(str(amount)) / QUANTUM_USD).to_integral_value(rounding=rounding))


def _usd(micros: int) -> float:
    return float(Decimal(micros) * QUANTUM_USD)


def check_budget(budget_usd: float) -> None:
    """Refuse a budget that is not a finite amount above 0 (naming ``/budgetUsd``)."""
    if not (math.isfinite(budget_usd) and budget_usd > 0):
        raise ValidationFailed(f"budgetUsd must be greater than 0 (got {budget_usd})", field=FIELD)


def split_budget(budget_usd: float, caps: Sequence[float | None]) -> list[float]:
    """Each child's ``maxTotalChargeUsd`` under the budget, in the order of ``caps``.

    ``caps`` are the children's own effective limits (None = uncapped). The result is
    ``min(cap, level)`` per child, with the largest level (a whole number of
    :data:`QUANTUM_USD`) whose total stays within the budget; a kept cap is returned as
    given. Raises :class:`BudgetTooSmall` when a child's share would be 0.
    """
    check_budget(budget_usd)
    remaining = _micros(budget_usd)
    # Fill from the smallest cap up: a child whose cap is within the equal share of what is
    # left keeps its cap (exactly, reserving it rounded up), which raises the others' share.
    order = sorted(range(len(caps)), key=lambda i: (caps[i] is None, caps[i] or 0.0))
    shares: list[float] = [0.0] * len(caps)
    for position, index in enumerate(order):
        equal = remaining // (len(order) - position)
        cap = caps[index]
        if cap is not None and (reserved := _micros(cap, ROUND_CEILING)) <= equal:
            shares[index] = cap
            remaining -= reserved
        else:
            shares[index] = _usd(equal)
            remaining -= equal
    if shares and min(shares) == 0:
        raise BudgetTooSmall(
            f"budgetUsd {budget_usd} is too small to split across {len(shares)} actor "
            f"run(s): each needs a maxTotalChargeUsd of at least {QUANTUM_USD} USD",
            field=FIELD,
        )
    return shares
