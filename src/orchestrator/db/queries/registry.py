"""The actor registry in shared config: logical actor names → platform actor and defaults.

Entries live in ``shared_config`` under ``actor:<name>`` so every process reads the same
registry and an operator can edit it without a deploy. It is seeded from a JSON file; a
seed never overwrites an entry an operator has changed unless asked to.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import Connection, select, update

from orchestrator.db.queries._common import insert_ignoring_conflicts, utcnow
from orchestrator.db.schema import shared_config
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


class ActorEntry(BaseModel):
    """One registered actor."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    platform_actor_id: str = Field(alias="platformActorId")
    description: str = ""
    defaults: ActorDefaults = Field(default_factory=ActorDefaults)
    caps: ActorCaps = Field(default_factory=ActorCaps)

    @model_validator(mode="after")
    def _defaults_within_caps(self) -> ActorEntry:
        # A default above its own cap could never be used: refuse the entry instead.
        for name in ("max_items", "max_total_charge_usd"):
            cap, default = getattr(self.caps, name), getattr(self.defaults, name)
            if cap is not None and default is not None and default > cap:
                raise ValueError(f"defaults.{name} ({default}) is above caps.{name} ({cap})")
        return self


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
