"""The actor registry (the actor catalog) in shared config: logical actor names → entries.

Entries live in ``shared_config`` under ``actor:<name>`` so every process reads the same
registry and an operator can edit it without a deploy. It is seeded from a JSON file; a
seed never overwrites an entry an operator has changed unless asked to.

An entry is plain data: the platform actor, option defaults and caps, and (the catalog,
issue 12) what the actor produces (``capabilities``), what it consumes (``inputSchema``,
a JSON Schema checked when the entry is saved) and the fields of its rows
(``outputFields``). Every write that changes an entry is versioned in the catalog's change
log (``queries.catalog``) in the same transaction; a write that changes nothing is none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)
from sqlalchemy import Connection, delete, select, update

from orchestrator.db.queries import catalog as catalog_log
from orchestrator.db.queries._common import insert_ignoring_conflicts, utcnow
from orchestrator.db.schema import shared_config
from orchestrator.domain.input_schema import schema_error
from orchestrator.domain.planning import InputSource, RowsRule
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
#: Who wrote an entry seeded from the registry file (the change log's ``changedBy``).
SEED_AUTHOR = "seed"


def _integral(value: Any) -> Any:
    """JSON Schema's integers include ``313.0``; strict models would refuse it otherwise."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


#: An integer as JSON Schema means it: no booleans, no strings, integral floats allowed.
JsonInt = Annotated[int, BeforeValidator(_integral)]


class ActorDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)

    memory_mb: JsonInt | None = Field(default=None, alias="memoryMb")
    timeout_sec: JsonInt | None = Field(default=None, alias="timeoutSec")
    build: str | None = None
    max_items: JsonInt | None = Field(default=None, alias="maxItems")
    max_total_charge_usd: float | None = Field(
        default=None, alias="maxTotalChargeUsd", gt=0, allow_inf_nan=False
    )

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

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)

    # The bound before the coercion, or pydantic documents it as "ge" instead of "minimum".
    max_items: Annotated[int, Field(ge=1), BeforeValidator(_integral)] | None = Field(
        default=None, alias="maxItems"
    )
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


# --- catalog fields (issue 12): capabilities, input schema, output fields -------------------

#: A capability name: what kind of rows an actor produces (``leads``, ``web-traffic``).
CAPABILITY_PATTERN = r"^[a-z][a-z0-9-]*$"
Capability = Annotated[str, StringConstraints(pattern=CAPABILITY_PATTERN, max_length=64)]
#: The type of an output field: a JSON Schema type name, or ``any`` when it varies.
FieldType = Literal["string", "integer", "number", "boolean", "object", "array", "null", "any"]


class OutputField(BaseModel):
    """One field of the actor's output rows."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(min_length=1, max_length=128)
    type: FieldType
    description: str = ""


#: A dotted path into the planner's brief context (``brief.targetCount``, ``icp``).
BriefPath = Annotated[
    str, StringConstraints(pattern=r"^(brief|icp|limits)(\.[A-Za-z0-9_-]+)*$", max_length=256)
]


class PlanningSource(BaseModel):
    """One way the planner fills an input field: ``from`` a brief path, or from the rows of
    the step that meets ``need`` (the distinct values of ``field``, at most ``max``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)

    from_: BriefPath | None = Field(default=None, alias="from")
    need: Capability | None = None
    field: str | None = Field(default=None, min_length=1, max_length=128)
    max: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> PlanningSource:
        if (self.from_ is None) == (self.need is None):
            raise ValueError("a source has either `from` (a brief path) or `need` and `field`")
        if self.need is not None and self.field is None:
            raise ValueError("a source with `need` names the `field` of its rows")
        if self.from_ is not None and (self.field is not None or self.max is not None):
            raise ValueError("`field` and `max` belong to a source with `need`")
        return self

    def as_source(self) -> InputSource:
        return InputSource(path=self.from_, need=self.need, field=self.field, max=self.max)


class PlanningRows(BaseModel):
    """How many rows to expect: ``from`` a brief path (else ``default``), or ``perValue``
    (one per value of that input)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)

    from_: BriefPath | None = Field(default=None, alias="from")
    default: Annotated[int, Field(ge=0)] | None = None
    per_value: str | None = Field(default=None, alias="perValue")

    def as_rule(self) -> RowsRule:
        return RowsRule(path=self.from_, default=self.default, per_value=self.per_value)


class PlanningInfo(BaseModel):
    """How the planner (``domain.planning``) builds this actor's input from a brief."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)

    inputs: dict[str, list[PlanningSource]] = Field(
        default_factory=dict, description="Per input field, the sources to try in order."
    )
    required: list[str] = Field(
        default_factory=list, description="Input fields without which the actor is no choice."
    )
    rows: PlanningRows = Field(default_factory=PlanningRows)
    row_event: str | None = Field(
        default=None, alias="rowEvent", description="Pay per event: the event charged per row."
    )
    priority: int = Field(default=0, description="Breaks ties of equal cost (higher first).")


class CatalogFields(BaseModel):
    """What the catalog knows of an actor beyond how to start it. All optional: an entry
    without them (one stored before the catalog) accepts any input and declares nothing.
    The option models and output fields are strict (no ``false`` for a number, no ``"5"``
    for an integer): entries are written by people, and a silently coerced value is a
    mistake kept."""

    model_config = ConfigDict(populate_by_name=True)

    capabilities: list[Capability] = Field(
        default_factory=list, description="What the actor produces, e.g. `leads`."
    )
    input_schema: dict[str, Any] = Field(
        default_factory=dict,
        alias="inputSchema",
        description="JSON Schema (draft 2020-12) every run's input must satisfy; {} accepts any.",
    )
    output_fields: list[OutputField] = Field(
        default_factory=list, alias="outputFields", description="The fields of its rows."
    )
    planning: PlanningInfo | None = Field(
        default=None, description="How the planner fills its input from a brief (`POST /plans`)."
    )

    @field_validator("capabilities")
    @classmethod
    def _distinct_capabilities(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("capabilities must not repeat a name")
        return value

    @field_validator("input_schema")
    @classmethod
    def _a_valid_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if (error := schema_error(value)) is not None:
            where = f" at {error.pointer}" if error.pointer else ""
            raise ValueError(f"not a valid JSON Schema (draft 2020-12){where}: {error.message}")
        return value

    @field_validator("output_fields")
    @classmethod
    def _distinct_fields(cls, value: list[OutputField]) -> list[OutputField]:
        names = [f.name for f in value]
        if len(set(names)) != len(names):
            raise ValueError("outputFields must not repeat a field name")
        return value


# --- end of the catalog fields ---------------------------------------------------------------


class ActorEntry(CatalogFields):
    """One registered actor."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    platform_actor_id: str = Field(alias="platformActorId", min_length=1, max_length=256)
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


def _stored(entry: ActorEntry) -> str:
    return entry.model_dump_json(by_alias=True, exclude_none=True)


def get_actor(conn: Connection, name: str) -> ActorEntry | None:
    value = conn.execute(
        select(shared_config.c.value_json).where(shared_config.c.key == _PREFIX + name)
    ).scalar_one_or_none()
    return ActorEntry.model_validate_json(value) if value is not None else None


def save_actor(
    conn: Connection,
    name: str,
    entry: ActorEntry,
    *,
    overwrite: bool = True,
    changed_by: str = SEED_AUTHOR,
) -> int | None:
    """Register ``name``; the catalog version of the change, or None if nothing changed
    (the same entry is there already, or another one is and ``overwrite`` is off)."""
    value = _stored(entry)
    catalog_log.lock_catalog(conn)
    now = utcnow()
    inserted = conn.execute(
        insert_ignoring_conflicts(conn, shared_config, ["key"])
        .values(key=_PREFIX + name, value_json=value, updated_at=now)
        .returning(shared_config.c.key)
    ).first()
    if inserted is not None:
        return catalog_log.record_change(conn, name, value, change="created", changed_by=changed_by)
    if not overwrite:
        return None
    current = conn.execute(
        select(shared_config.c.value_json).where(shared_config.c.key == _PREFIX + name)
    ).scalar_one()
    if current == value:
        return None
    conn.execute(
        update(shared_config)
        .where(shared_config.c.key == _PREFIX + name)
        .values(value_json=value, updated_at=now)
    )
    return catalog_log.record_change(conn, name, value, change="replaced", changed_by=changed_by)


def put_actor(
    conn: Connection,
    name: str,
    entry: ActorEntry,
    *,
    overwrite: bool = True,
    changed_by: str = SEED_AUTHOR,
) -> bool:
    """Register ``name``. Returns True if a row was written (see :func:`save_actor`)."""
    return save_actor(conn, name, entry, overwrite=overwrite, changed_by=changed_by) is not None


def delete_actor(conn: Connection, name: str, *, changed_by: str) -> int | None:
    """Remove ``name``; the catalog version of the deletion, or None if it was not there."""
    catalog_log.lock_catalog(conn)
    gone = conn.execute(delete(shared_config).where(shared_config.c.key == _PREFIX + name))
    if not gone.rowcount:
        return None
    return catalog_log.record_change(conn, name, None, change="deleted", changed_by=changed_by)


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
