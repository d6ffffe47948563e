"""The actor pricing rule (``domain.pricing``) and the registry's pricing record: a run's
minimum charge, the record's shape and validation, and the bundled registry's prices."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.config.bootstrap import bundled_registry_text
from orchestrator.db.queries.registry import ActorEntry, PricingInfo, load_registry_file
from orchestrator.domain.pricing import (
    ActorPricing,
    ChargeBelowMinimum,
    ChargeEvent,
    check_charge_limit,
    minimum_charge_usd,
    start_events,
)

START = {"eventPriceUsd": 0.001, "eventTitle": "Actor start"}
PER_EVENT: dict[str, Any] = {
    "pricingModel": "PAY_PER_EVENT",
    "pricingPerEvent": {
        "actorChargeEvents": {"apify-actor-start": START, "row": {"eventPriceUsd": 0.01}}
    },
    "minimalMaxTotalChargeUsd": 0.005,
}


@pytest.mark.parametrize(
    ("memory_mb", "events"), [(None, 1), (128, 1), (512, 1), (1024, 1), (4096, 4), (32768, 32)]
)
def test_one_start_event_per_gb_at_least_one(memory_mb: int | None, events: int) -> None:
    assert start_events(memory_mb) == events


@pytest.mark.parametrize(
    ("memory_mb", "minimum"),
    [
        (1024, 0.005),  # the record's minimum is above one start event (0.001)
        (4096, 0.005),  # four start events (0.004) are still below it
        (8192, 0.008),  # eight are above it
        (None, 0.005),  # unknown memory: one start event, the least the platform charges
    ],
)
def test_the_minimum_of_a_pay_per_event_run_is_the_larger_of_its_floor_and_its_start(
    memory_mb: int | None, minimum: float
) -> None:
    pricing = PricingInfo.model_validate(PER_EVENT).as_pricing()
    assert minimum_charge_usd(pricing, memory_mb) == minimum


def test_other_models_and_unknown_pricing_have_no_minimum() -> None:
    assert minimum_charge_usd(None, 4096) == 0
    for model, extra in (
        ("FREE", {}),
        ("PRICE_PER_DATASET_ITEM", {"pricePerUnitUsd": 0.002}),
        ("FLAT_PRICE_PER_MONTH", {"pricePerUnitUsd": 10}),
    ):
        pricing = PricingInfo.model_validate({"pricingModel": model, **extra}).as_pricing()
        assert minimum_charge_usd(pricing, 32768) == 0, model
    # Pay per event without a start event or a floor: nothing is charged before a row.
    bare = ActorPricing(model="PAY_PER_EVENT", events={"row": ChargeEvent(0.01)})
    assert minimum_charge_usd(bare, 4096) == 0


def test_a_limit_below_the_minimum_names_the_field_and_where_it_came_from() -> None:
    check_charge_limit(None, 0.02, pointer="/x")
    check_charge_limit(0.02, 0.02, pointer="/x")
    with pytest.raises(ChargeBelowMinimum) as raised:
        check_charge_limit(0.01, 0.02, pointer="/runs/0/options/maxTotalChargeUsd", source="s")
    assert raised.value.field == "/runs/0/options/maxTotalChargeUsd"
    assert raised.value.code == "validation-failed"
    assert "0.02 USD" in raised.value.detail and "(s)" in raised.value.detail


def test_the_pricing_record_converts_to_the_domain_value() -> None:
    pricing = PricingInfo.model_validate(PER_EVENT).as_pricing()
    assert pricing == ActorPricing(
        model="PAY_PER_EVENT",
        events={
            "apify-actor-start": ChargeEvent(0.001, "Actor start"),
            "row": ChargeEvent(0.01),
        },
        minimal_max_total_charge_usd=0.005,
    )
    per_item = PricingInfo.model_validate(
        {"pricingModel": "PRICE_PER_DATASET_ITEM", "pricePerUnitUsd": 0.002, "unitName": "result"}
    ).as_pricing()
    assert (per_item.price_per_unit_usd, per_item.unit_name) == (0.002, "result")


@pytest.mark.parametrize(
    "record",
    [
        {"pricingModel": "PAY_PER_USAGE"},
        {"pricingModel": "FREE", "price": 1},  # extra fields are refused
        {"pricingModel": "PAY_PER_EVENT"},  # events are required
        {**PER_EVENT, "pricePerUnitUsd": 0.1},
        {**PER_EVENT, "minimalMaxTotalChargeUsd": -0.01},
        {
            **PER_EVENT,
            "pricingPerEvent": {"actorChargeEvents": {"row": {"eventPriceUsd": -1}}},
        },
        {**PER_EVENT, "pricingPerEvent": {"actorChargeEvents": {"row": {"price": 1}}}},
        {"pricingModel": "PRICE_PER_DATASET_ITEM"},  # its price is required
        {"pricingModel": "PRICE_PER_DATASET_ITEM", "pricePerUnitUsd": float("inf")},
        {"pricingModel": "FLAT_PRICE_PER_MONTH", "pricePerUnitUsd": 10, "unitName": "month"},
        {"pricingModel": "FREE", "pricingPerEvent": {"actorChargeEvents": {}}},
        {"pricingModel": "FREE", "minimalMaxTotalChargeUsd": 0.5},
    ],
)
def test_a_pricing_record_outside_the_platforms_shape_is_refused(record: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        PricingInfo.model_validate(record)


def test_an_entry_whose_charge_limit_is_below_its_minimum_is_refused() -> None:
    entry = {"platformActorId": "u~a", "pricing": PER_EVENT}
    for where in ("defaults", "caps"):
        with pytest.raises(ValidationError, match=re.escape(f"{where}.maxTotalChargeUsd")):
            ActorEntry.model_validate({**entry, where: {"maxTotalChargeUsd": 0.004}})
    # The minimum grows with the default memory: 8 start events at 8 GB.
    with pytest.raises(ValidationError, match=re.escape("minimum charge of 0.008")):
        ActorEntry.model_validate(
            {**entry, "defaults": {"memoryMb": 8192, "maxTotalChargeUsd": 0.005}}
        )
    at_minimum = ActorEntry.model_validate({**entry, "defaults": {"maxTotalChargeUsd": 0.005}})
    # Stored and read back unchanged (the registry keeps entries as JSON by alias).
    stored = at_minimum.model_dump_json(by_alias=True, exclude_none=True)
    assert ActorEntry.model_validate_json(stored) == at_minimum
    assert ActorEntry.model_validate({"platformActorId": "u~a"}).pricing is None


def test_the_bundled_registry_prices_each_actor() -> None:
    entries = {
        name: ActorEntry.model_validate(raw)
        for name, raw in load_registry_file(bundled_registry_text()).items()
    }
    models = {name: e.pricing.pricing_model for name, e in entries.items() if e.pricing}
    assert models == {
        "ultron-leadgen": "PAY_PER_EVENT",
        "ultron-similarweb-bulk": "PRICE_PER_DATASET_ITEM",
        "ultron-generator": "FREE",
    }
    leadgen = entries["ultron-leadgen"].actor_pricing()
    assert leadgen is not None and minimum_charge_usd(leadgen, 1024) == 0.02
