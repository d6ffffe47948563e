"""The actor registry in shared config: logical actor names → platform actor and defaults.

Entries live in ``shared_config`` under ``actor:<name>`` so every process reads the same
registry and an operator can edit it without a deploy. It is seeded from a JSON file; a
seed never overwrites an entry an operator has changed unless asked to.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import Connection, select, update

from orchestrator.db.queries._common import insert_ignoring_conflicts, utcnow
from orchestrator.db.schema import shared_config
from orchestrator.domain.pricing import (
    FLAT_PRICE_PER_MONTH,
    PAY_PER_EVENT,
    PRICE_PER_DATASET_ITEM,
    ActorPricing,
    ChargeEvent,
    minimum_charge_usd,
)
from orchestrator.domain.run_options import OptionCaps, RunOptions

_PREFIX = "actor:"


class ActorDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    memory_mb: int | None = Field(default=None, alias="memoryMb")
    timeout_sec: int | None = Field(default=None, alias="timeoutSec")
    build: str | None = None
    max_items: int | None = Field(default=None, alias="maxItems")
    max_total_charge_usd: float | None = Field(default=None, alias="maxTotalChargeUsd")

    def as_options(self) -> RunOptions:
        return RunOptions(
            memory_mb=self.memory_mb,
            timeout_sec=self.timeout_sec,
            build=self.build,
            max_items=self.max_items,
            max_total_charge_usd=self.max_total_charge_usd,
        )


class ActorCaps(BaseModel):
    """Hard caps no run of the actor may exceed (``domain.run_options.OptionCaps``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    max_items: int | None = Field(default=None, alias="maxItems", ge=1)
    max_total_charge_usd: float | None = Field(default=None, alias="maxTotalChargeUsd", gt=0)

    def as_caps(self) -> OptionCaps:
        return OptionCaps(max_items=self.max_items, max_total_charge_usd=self.max_total_charge_usd)


class ChargeEventInfo(BaseModel):
    """One ``actorChargeEvents`` entry of a pay-per-event pricing record."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    event_price_usd: float = Field(alias="eventPriceUsd", ge=0, allow_inf_nan=False)
    event_title: str | None = Field(default=None, alias="eventTitle")
    event_description: str | None = Field(default=None, alias="eventDescription")


class PricingPerEvent(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    actor_charge_events: dict[str, ChargeEventInfo] = Field(alias="actorChargeEvents")


class PricingInfo(BaseModel):
    """An actor's pricing, in the platform's ``pricingInfo`` vocabulary (``domain.pricing``).

    ``pricingPerEvent`` belongs to (and is required for) PAY_PER_EVENT, as does
    ``minimalMaxTotalChargeUsd``; ``pricePerUnitUsd`` to (and is required for)
    PRICE_PER_DATASET_ITEM and FLAT_PRICE_PER_MONTH; ``unitName`` to PRICE_PER_DATASET_ITEM.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    pricing_model: Literal[
        "PAY_PER_EVENT", "PRICE_PER_DATASET_ITEM", "FLAT_PRICE_PER_MONTH", "FREE"
    ] = Field(alias="pricingModel")
    pricing_per_event: PricingPerEvent | None = Field(default=None, alias="pricingPerEvent")
    price_per_unit_usd: float | None = Field(
        default=None, alias="pricePerUnitUsd", ge=0, allow_inf_nan=False
    )
    unit_name: str | None = Field(default=None, alias="unitName")
    minimal_max_total_charge_usd: float | None = Field(
        default=None, alias="minimalMaxTotalChargeUsd", ge=0, allow_inf_nan=False
    )

    @model_validator(mode="after")
    def _fields_of_the_model(self) -> PricingInfo:
        model = self.pricing_model
        per_event = model == PAY_PER_EVENT
        per_unit = model in (PRICE_PER_DATASET_ITEM, FLAT_PRICE_PER_MONTH)
        if per_event != (self.pricing_per_event is not None):
            raise ValueError(f"pricingPerEvent is {'required' if per_event else 'not'} for {model}")
        if not per_event and self.minimal_max_total_charge_usd is not None:
            raise ValueError(f"minimalMaxTotalChargeUsd is only for {PAY_PER_EVENT}")
        if per_unit != (self.price_per_unit_usd is not None):
            raise ValueError(f"pricePerUnitUsd is {'required' if per_unit else 'not'} for {model}")
        if model != PRICE_PER_DATASET_ITEM and self.unit_name is not None:
            raise ValueError(f"unitName is only for {PRICE_PER_DATASET_ITEM}")
        return self

    def as_pricing(self) -> ActorPricing:
        events = self.pricing_per_event.actor_charge_events if self.pricing_per_event else {}
        return ActorPricing(
            model=self.pricing_model,
            events={
                name: ChargeEvent(e.event_price_usd, e.event_title, e.event_description)
                for name, e in events.items()
            },
            price_per_unit_usd=self.price_per_unit_usd,
            unit_name=self.unit_name,
            minimal_max_total_charge_usd=self.minimal_max_total_charge_usd,
        )


class ActorEntry(BaseModel):
    """One registered actor."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    platform_actor_id: str = Field(alias="platformActorId")
    description: str = ""
    defaults: ActorDefaults = Field(default_factory=ActorDefaults)
    caps: ActorCaps = Field(default_factory=ActorCaps)
    #: What the actor charges (None: not known, no minimum charge).
    pricing: PricingInfo | None = None

    @model_validator(mode="after")
    def _defaults_within_caps(self) -> ActorEntry:
        # A default above its own cap could never be used: refuse the entry instead.
        for name in ("max_items", "max_total_charge_usd"):
            cap, default = getattr(self.caps, name), getattr(self.defaults, name)
            if cap is not None and default is not None and default > cap:
                raise ValueError(f"defaults.{name} ({default}) is above caps.{name} ({cap})")
        # A charge limit below the actor's minimum charge is one the platform refuses.
        minimum = minimum_charge_usd(self.actor_pricing(), self.defaults.memory_mb)
        for where in ("defaults", "caps"):
            limit = getattr(self, where).max_total_charge_usd
            if limit is not None and limit < minimum:
                raise ValueError(
                    f"{where}.maxTotalChargeUsd ({limit}) is below the actor's minimum charge "
                    f"of {minimum:g} USD (at the default memory)"
                )
        return self

    def actor_pricing(self) -> ActorPricing | None:
        return self.pricing.as_pricing() if self.pricing is not None else None


def list_actors(conn: Connection) -> dict[str, ActorEntry]:
    rows = conn.execute(
        select(shared_config.c.key, shared_config.c.value_json)
        .where(shared_config.c.key.startswith(_PREFIX))
        .order_by(shared_config.c.key)
    )
    return {key.removeprefix(_PREFIX): ActorEntry.model_validate_json(value) for key, value in rows}


def put_actor(conn: Connection, name: str, entry: ActorEntry, *, overwrite: bool = True) -> bool:
    """Register ``name``. Returns True if a row was written."""
    value = entry.model_dump_json(by_alias=True, exclude_none=True)
    now = utcnow()
    inserted = conn.execute(
        insert_ignoring_conflicts(conn, shared_config, ["key"])
        .values(key=_PREFIX + name, value_json=value, updated_at=now)
        .returning(shared_config.c.key)
    ).first()
    if inserted is not None or not overwrite:
        return inserted is not None
    conn.execute(
        update(shared_config)
        .where(shared_config.c.key == _PREFIX + name)
        .values(value_json=value, updated_at=now)
    )
    return True


def seed_registry(conn: Connection, entries: Mapping[str, Any], *, overwrite: bool = False) -> int:
    """Register every entry of a registry document; returns how many rows were written."""
    written = 0
    for name, raw in entries.items():
        if put_actor(conn, name, ActorEntry.model_validate(raw), overwrite=overwrite):
            written += 1
    return written


def load_registry_file(text: str) -> dict[str, Any]:
    document = json.loads(text)
    actors = document.get("actors", document) if isinstance(document, dict) else document
    if not isinstance(actors, dict):
        raise ValueError("an actor registry file maps actor names to entries")
    return actors
