"""What a run costs: the scripted actors' pricing models and the platform's usage rates.

The vocabulary is Apify's (`pricingInfo.pricingModel`): PAY_PER_EVENT, PRICE_PER_DATASET_ITEM,
FLAT_PRICE_PER_MONTH and FREE. Who pays the platform usage (compute units, dataset writes)
depends on the model: the user for FREE and rented (FLAT_PRICE_PER_MONTH) actors, the actor's
developer for pay-per-event and pay-per-result ones, whose users pay only the charges. The
README ("Pricing and usage") says where each fact comes from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from apify_emulator.util import iso

PAY_PER_EVENT = "PAY_PER_EVENT"
PRICE_PER_DATASET_ITEM = "PRICE_PER_DATASET_ITEM"
FLAT_PRICE_PER_MONTH = "FLAT_PRICE_PER_MONTH"
FREE = "FREE"
MODELS = (PAY_PER_EVENT, PRICE_PER_DATASET_ITEM, FLAT_PRICE_PER_MONTH, FREE)

# 1 compute unit = 1 GB of memory for 1 hour; the Free/Starter plan price per unit.
USD_PER_COMPUTE_UNIT = 0.3
# Dataset writes on the public price list: $0.005 per 1,000.
USD_PER_DATASET_WRITE = 0.005 / 1000
# The platform's synthetic start event: charged by the platform itself, once per GB of memory
# (at least once), never by the actor's code.
START_EVENT = "apify-actor-start"
# Apify's share of the actor's price, as on the platform's pricing records.
APIFY_MARGIN = 0.2
# When every emulated pricing record took effect (stable, so answers are reproducible).
PRICING_SINCE = 1_700_000_000.0
# Sub-cent float noise must not cost a whole row at the charge limit.
_EPSILON = 1e-9


@dataclass(frozen=True)
class ChargeEvent:
    """One chargeable event of a pay-per-event actor (`actorChargeEvents[name]`)."""

    name: str
    title: str
    description: str
    price_usd: float
    primary: bool = False


@dataclass(frozen=True)
class Pricing:
    """An actor's pricing record; runs keep a copy, as the platform keeps `pricingInfo`."""

    model: str = FREE
    events: tuple[ChargeEvent, ...] = ()
    # PAY_PER_EVENT: the event the actor charges for each row it pushes.
    item_event: str | None = None
    # PRICE_PER_DATASET_ITEM: the price of one result; FLAT_PRICE_PER_MONTH: the monthly rent.
    price_per_unit_usd: float = 0.0
    unit_name: str = "result"
    trial_minutes: int = 0
    # PAY_PER_EVENT: the smallest maxTotalChargeUsd a run start may ask for (None = no floor).
    minimal_max_total_charge_usd: float | None = None

    @property
    def pays_platform_usage(self) -> bool:
        """Whether the user (not the developer) pays compute units and storage for a run."""
        return self.model in (FREE, FLAT_PRICE_PER_MONTH)

    def _price(self, name: str | None) -> float:
        return next((e.price_usd for e in self.events if e.name == name), 0.0)

    def refuses_max_total_charge(self, max_total_charge_usd: float) -> bool:
        """Whether a start asking for this maxTotalChargeUsd is below the actor's minimum."""
        floor = self.minimal_max_total_charge_usd
        return self.model == PAY_PER_EVENT and floor is not None and max_total_charge_usd < floor

    def start_events(self, memory_mbytes: int) -> int:
        """How many `apify-actor-start` events a run of this memory is charged."""
        if self.model != PAY_PER_EVENT or not any(e.name == START_EVENT for e in self.events):
            return 0
        return max(1, memory_mbytes // 1024)

    def event_counts(self, memory_mbytes: int, items: int) -> dict[str, int]:
        """`chargedEventCounts` once `items` rows are pushed (pay-per-event only)."""
        if self.model != PAY_PER_EVENT:
            return {}
        counts = {e.name: 0 for e in self.events}
        if START_EVENT in counts:
            counts[START_EVENT] = self.start_events(memory_mbytes)
        if self.item_event in counts:
            counts[self.item_event] = items
        return counts

    def charged_usd(self, memory_mbytes: int, items: int) -> float:
        """What the user is charged by the actor (not platform usage) for `items` rows."""
        if self.model == PAY_PER_EVENT:
            counts = self.event_counts(memory_mbytes, items)
            return sum(count * self._price(name) for name, count in counts.items())
        if self.model == PRICE_PER_DATASET_ITEM:
            return items * self.price_per_unit_usd
        return 0.0

    def affordable_items(self, memory_mbytes: int, max_total_charge_usd: float) -> int | None:
        """Rows a pay-per-event run can be charged for within its maxTotalChargeUsd.

        None when the limit cannot stop the rows: the platform enforces maxTotalChargeUsd for
        pay-per-event actors only, and a free row is never refused.
        """
        price = self._price(self.item_event)
        if self.model != PAY_PER_EVENT or price <= 0:
            return None
        left = max_total_charge_usd - self.charged_usd(memory_mbytes, 0)
        return max(0, math.floor(left / price + _EPSILON))

    def usage(self, memory_mbytes: int, run_secs: float, items: int) -> dict[str, Any]:
        """The run's `usage`, `usageUsd`, `usageTotalUsd` (and `chargedEventCounts`)."""
        compute_units = memory_mbytes / 1024 * run_secs / 3600
        data: dict[str, Any] = {
            "usage": {"ACTOR_COMPUTE_UNITS": round(compute_units, 6), "DATASET_WRITES": items}
        }
        if self.pays_platform_usage:
            usd = {
                "ACTOR_COMPUTE_UNITS": round(compute_units * USD_PER_COMPUTE_UNIT, 6),
                "DATASET_WRITES": round(items * USD_PER_DATASET_WRITE, 6),
            }
            data["usageUsd"] = usd
            data["usageTotalUsd"] = round(sum(usd.values()), 6)
        else:
            # The developer pays the platform usage; the user sees only the charges.
            data["usageUsd"] = None
            data["usageTotalUsd"] = round(self.charged_usd(memory_mbytes, items), 6)
        if self.model == PAY_PER_EVENT:
            data["chargedEventCounts"] = self.event_counts(memory_mbytes, items)
        return data

    def to_api(self) -> dict[str, Any]:
        """The platform's pricing record: an actor's `pricingInfos[]` entry, a run's
        `pricingInfo`."""
        since = iso(PRICING_SINCE)
        info: dict[str, Any] = {
            "pricingModel": self.model,
            "apifyMarginPercentage": APIFY_MARGIN if self.model != FREE else 0.0,
            "createdAt": since,
            "startedAt": since,
        }
        if self.model == PAY_PER_EVENT:
            info["pricingPerEvent"] = {
                "actorChargeEvents": {
                    e.name: {
                        "eventTitle": e.title,
                        "eventDescription": e.description,
                        "eventPriceUsd": e.price_usd,
                        "isPrimaryEvent": e.primary,
                    }
                    for e in self.events
                }
            }
            info["minimalMaxTotalChargeUsd"] = self.minimal_max_total_charge_usd
        elif self.model == PRICE_PER_DATASET_ITEM:
            info["unitName"] = self.unit_name
            info["pricePerUnitUsd"] = self.price_per_unit_usd
        elif self.model == FLAT_PRICE_PER_MONTH:
            info["pricePerUnitUsd"] = self.price_per_unit_usd
            info["trialMinutes"] = self.trial_minutes
        return info

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "events": [
                {
                    "name": e.name,
                    "title": e.title,
                    "description": e.description,
                    "price_usd": e.price_usd,
                    "primary": e.primary,
                }
                for e in self.events
            ],
            "item_event": self.item_event,
            "price_per_unit_usd": self.price_per_unit_usd,
            "unit_name": self.unit_name,
            "trial_minutes": self.trial_minutes,
            "minimal_max_total_charge_usd": self.minimal_max_total_charge_usd,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Pricing:
        # A state file written before a field existed lacks it: the field's default applies.
        events = tuple(ChargeEvent(**e) for e in data.get("events", ()))
        return cls(**{**data, "events": events})


# Compute only: what the generator (and a run from a state file without pricing) costs.
FREE_PRICING = Pricing()
