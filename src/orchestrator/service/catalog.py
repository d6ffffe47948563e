"""The actor catalog's use cases: read it (any key), edit it (operators), read its history.

The catalog is the actor registry in shared config, grown (``db.queries.registry``): per
logical actor its platform actor, capabilities, input JSON Schema, output fields and option
defaults and caps - plain data, so an actor that lives only on the platform is added with
one PUT and no code. Every change is one catalog version (``db.queries.catalog``), written
in the same transaction as the entry; a request records the version it was validated
against. An edit may name the entry version it expects (``If-Match``): a concurrent edit
then fails instead of being overwritten.

Routes and the CLI (through the HTTP API) call these; none of them holds a rule of its own.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection

from orchestrator.db.queries import catalog as catalog_queries
from orchestrator.db.queries import registry
from orchestrator.domain.errors import NotFound, ValidationFailed
from orchestrator.domain.input_schema import json_pointer
from orchestrator.service.auth import Principal
from orchestrator.service.errors import PreconditionFailed

log = logging.getLogger(__name__)

#: A logical actor name: what requests name in ``runs[].actor``.
ACTOR_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_ACTOR_NAME = re.compile(ACTOR_NAME_PATTERN)

#: ``If-Match: *`` - the entry must exist, whatever its version.
ANY_VERSION = "*"


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    entry: registry.ActorEntry
    #: The catalog version of the entry's latest change (0: never recorded).
    version: int


@dataclass(frozen=True)
class Catalog:
    version: int
    entries: tuple[CatalogEntry, ...]


@dataclass(frozen=True)
class SavedEntry:
    saved: CatalogEntry
    created: bool
    #: False when the entry was there already, identical (no new version).
    changed: bool


def author(caller: Principal | None) -> str:
    """How the change log names who made a change: the API key id (never the key)."""
    return f"key:{caller.key_id}" if caller is not None else "internal"


def valid_name(name: str) -> bool:
    return bool(_ACTOR_NAME.fullmatch(name))


def read_catalog(conn: Connection) -> Catalog:
    """Every entry and the catalog version, read together."""
    catalog_queries.lock_catalog(conn, shared=True)
    versions = catalog_queries.actor_versions(conn)
    entries = tuple(
        CatalogEntry(name=name, entry=entry, version=versions.get(name, 0))
        for name, entry in registry.list_actors(conn).items()
    )
    return Catalog(version=catalog_queries.current_version(conn), entries=entries)


def get_entry(conn: Connection, name: str) -> CatalogEntry:
    """One entry, or :class:`NotFound` naming it."""
    entry = registry.get_actor(conn, name) if valid_name(name) else None
    if entry is None:
        raise NotFound(f"actor {name!r} is not in the catalog", field="name")
    version = catalog_queries.actor_versions(conn).get(name, 0)
    return CatalogEntry(name=name, entry=entry, version=version)


def parse_entry(raw: Mapping[str, Any], *, pointer: str = "") -> registry.ActorEntry:
    """An entry from its JSON form, or :class:`ValidationFailed` naming the first bad field
    (as a JSON pointer under ``pointer``)."""
    try:
        return registry.ActorEntry.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = pointer + json_pointer(first["loc"])
        raise ValidationFailed(f"{field or '/'}: {first['msg']}", field=field or "/") from None


def _check_expected(name: str, current: int | None, expected: str | int | None) -> None:
    """``If-Match``: ``*`` wants the entry to exist; a number, its version to be that one."""
    if expected is None:
        return
    if expected == ANY_VERSION:
        if current is None:
            raise PreconditionFailed(f"actor {name!r} is not in the catalog", field="If-Match")
        return
    if current != expected:
        have = f"is at version {current}" if current is not None else "is not in the catalog"
        raise PreconditionFailed(
            f"actor {name!r} {have}, not version {expected}; read it again and retry",
            field="If-Match",
        )


def put_entry(
    conn: Connection,
    name: str,
    entry: registry.ActorEntry,
    *,
    caller: Principal | None,
    expected: str | int | None = None,
) -> SavedEntry:
    """Create or replace ``name`` (one new catalog version unless it is unchanged)."""
    if not valid_name(name):
        raise ValidationFailed(f"actor name {name!r} must match {ACTOR_NAME_PATTERN}", field="name")
    catalog_queries.lock_catalog(conn)
    existing = registry.get_actor(conn, name)
    current = catalog_queries.actor_versions(conn).get(name, 0) if existing else None
    _check_expected(name, current, expected)
    version = registry.save_actor(conn, name, entry, changed_by=author(caller))
    if version is not None:
        log.info(
            "actor catalog: %s %s (version %d)",
            name,
            "replaced" if existing else "created",
            version,
        )
    saved = CatalogEntry(name=name, entry=entry, version=version or current or 0)
    return SavedEntry(saved=saved, created=existing is None, changed=version is not None)


def remove_entry(
    conn: Connection,
    name: str,
    *,
    caller: Principal | None,
    expected: str | int | None = None,
) -> catalog_queries.CatalogChange:
    """Delete ``name`` (one new catalog version); the deletion as recorded."""
    catalog_queries.lock_catalog(conn)
    existing = registry.get_actor(conn, name) if valid_name(name) else None
    if existing is None:
        raise NotFound(f"actor {name!r} is not in the catalog", field="name")
    _check_expected(name, catalog_queries.actor_versions(conn).get(name, 0), expected)
    version = registry.delete_actor(conn, name, changed_by=author(caller))
    assert version is not None  # it was there, and the lock is held
    log.info("actor catalog: %s deleted (version %d)", name, version)
    return catalog_queries.history(conn, name)[-1]


def entry_history(conn: Connection, name: str) -> list[catalog_queries.CatalogChange]:
    """Every recorded change of ``name``, oldest first; :class:`NotFound` if there is none."""
    changes = catalog_queries.history(conn, name) if valid_name(name) else []
    if not changes:
        raise NotFound(f"actor {name!r} has no catalog history", field="name")
    return changes
