"""What an actor charges, in Apify's own pricing vocabulary, and the least a run of it costs.

An actor's registry entry may carry its pricing record (the shape of the platform's
``pricingInfo``: ``pricingModel``, ``pricingPerEvent.actorChargeEvents``, ``pricePerUnitUsd``,
``unitName``, ``minimalMaxTotalChargeUsd``); :class:`ActorPricing` is that record as a plain
value, converted from the registry's validated model.

The *minimum charge* of a run (:func:`minimum_charge_usd`) is the smallest
``maxTotalChargeUsd`` worth sending for it:

- PAY_PER_EVENT: the larger of the record's ``minimalMaxTotalChargeUsd`` (the platform refuses
  a start below it with 400 ``max-total-charge-usd-below-minimum``; reference apify-notes §2.8,
  apify-client ``PricePerEventActorPricingInfo.minimalMaxTotalChargeUsd``) and the cost of the
  platform's synthetic ``apify-actor-start`` events, which it charges itself "when an Actor is
  started", "one event per GB with a minimum of one event" (Apify docs, pay per event,
  synthetic start event). A run whose limit cannot pay its own start does nothing useful.
  With no memory known (the actor's default applies) one start event is counted, the least
  the platform charges, so no start the platform would take is refused here.
- Every other model, and an actor without a pricing record: 0 (the platform enforces
  ``maxTotalChargeUsd`` for pay-per-event actors only).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

from orchestrator.domain.errors import ValidationFailed

PricingModel = Literal["PAY_PER_EVENT", "PRICE_PER_DATASET_ITEM", "FLAT_PRICE_PER_MONTH", "FREE"]
PAY_PER_EVENT: PricingModel = "PAY_PER_EVENT"
PRICE_PER_DATASET_ITEM: PricingModel = "PRICE_PER_DATASET_ITEM"
FLAT_PRICE_PER_MONTH: PricingModel = "FLAT_PRICE_PER_MONTH"
FREE: PricingModel = "FREE"

#: The platform's synthetic start event of pay-per-event actors.
START_EVENT = "apify-actor-start"
_MB_PER_GB = 1024


class ChargeBelowMinimum(ValidationFailed):
    """A run's ``maxTotalChargeUsd`` below its actor's minimum charge (the platform would
    refuse the start)."""


@dataclass(frozen=True)
class ChargeEvent:
    """One chargeable event (``actorChargeEvents[name]``)."""

    price_usd: float
    title: str | None = None
    description: str | None = None


@dataclass(frozen=True)
class ActorPricing:
    """An actor's pricing record. ``events`` is for PAY_PER_EVENT only; ``price_per_unit_usd``
    is the price of one result (PRICE_PER_DATASET_ITEM) or the monthly rent
    (FLAT_PRICE_PER_MONTH)."""

    model: PricingModel
    events: Mapping[str, ChargeEvent] = field(default_factory=dict)
    price_per_unit_usd: float | None = None
    unit_name: str | None = None
    minimal_max_total_charge_usd: float | None = None


def start_events(memory_mb: int | None) -> int:
    """How many ``apify-actor-start`` events a run of this memory is charged (one per GB, at
    least one)."""
    return max(1, (memory_mb or 0) // _MB_PER_GB)


def minimum_charge_usd(pricing: ActorPricing | None, memory_mb: int | None) -> float:
    """The least ``maxTotalChargeUsd`` a run of the actor at ``memory_mb`` may be given."""
    if pricing is None or pricing.model != PAY_PER_EVENT:
        return 0.0
    start = pricing.events.get(START_EVENT)
    # Through str() so 3 * 0.00005 is 0.00015, not a binary neighbour of it.
    start_usd = (
        float(Decimal(str(start.price_usd)) * start_events(memory_mb)) if start is not None else 0.0
    )
    return max(pricing.minimal_max_total_charge_usd or 0.0, start_usd)


def check_charge_limit(
    limit_usd: float | None, minimum_usd: float, *, pointer: str, source: str = ""
) -> None:
    """Raise :class:`ChargeBelowMinimum` naming ``pointer`` when ``limit_usd`` is set and below
    ``minimum_usd``; ``source`` says where a limit the caller did not send came from."""
    if limit_usd is not None and limit_usd < minimum_usd:
        raise ChargeBelowMinimum(
            f"maxTotalChargeUsd {limit_usd:g} is below the platform's minimum charge of "
            f"{minimum_usd:g} USD for this actor run" + (f" ({source})" if source else ""),
            field=pointer,
        )
