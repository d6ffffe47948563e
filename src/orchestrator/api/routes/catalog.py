"""The actor catalog: ``GET /actors`` (any key) and ``/admin/actors`` (admin keys only).

Each entry's ``ETag`` is the catalog version of its latest change; an edit may send it back
as ``If-Match`` (or ``*``: "it must exist") and is refused with a 412 if the entry changed
meanwhile (RFC 9110 §13.1.1), so two operators cannot overwrite each other unknowingly.
The use cases are ``service.catalog``'s; this module only translates HTTP.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path
from fastapi.responses import JSONResponse

from orchestrator.api.auth import AdminCaller, Caller
from orchestrator.api.deps import State
from orchestrator.api.schemas import ActorView, CatalogChangeView, CatalogHistoryView, CatalogView
from orchestrator.db.queries.catalog import CatalogChange
from orchestrator.db.queries.registry import ActorEntry
from orchestrator.service import catalog
from orchestrator.service.catalog import ACTOR_NAME_PATTERN, CatalogEntry

router = APIRouter(tags=["catalog"])

IfMatch = Annotated[
    str | None,
    Header(
        alias="If-Match",
        description='Only if the entry is at this version (its ETag, e.g. `"12"`), or `*`: '
        "only if it exists. A mismatch is a 412.",
    ),
]


def actor_view(found: CatalogEntry) -> ActorView:
    return ActorView.model_validate(
        {**found.entry.model_dump(by_alias=True), "name": found.name, "version": found.version}
    )


def change_view(change: CatalogChange) -> CatalogChangeView:
    return CatalogChangeView(
        version=change.version,
        actor=change.actor,
        change=change.change,
        entry=change.entry,
        changed_by=change.changed_by,
        changed_at=change.changed_at,
    )


def etag(version: int) -> dict[str, str]:
    return {"ETag": f'"{version}"'}


def expected_version(if_match: str | None) -> str | int | None:
    """An ``If-Match`` value: None, ``*``, or the version it names (any other text never
    matches, which is what RFC 9110 asks of a tag that is not the current one)."""
    if if_match is None:
        return None
    value = if_match.strip()
    if value == catalog.ANY_VERSION:
        return value
    digits = value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value
    return int(digits) if digits.isdigit() and len(digits) < 16 else value


@router.get(
    "/actors",
    response_model=CatalogView,
    summary="The actor catalog: every actor a request may name, with its input schema.",
    description="Each entry is what the orchestrator knows of one logical actor: its platform "
    "actor, the capabilities it produces, the JSON Schema its input must satisfy "
    "(`POST /runs` refuses other inputs with a 422), the fields of its rows, and its option "
    "defaults and caps. `version` counts the catalog's changes; a request records the "
    "version it was validated against (`catalogVersion`).",
)
def list_catalog(_caller: Caller, app_state: State) -> CatalogView:
    with app_state.reader.connect() as conn:
        found = catalog.read_catalog(conn)
    return CatalogView(version=found.version, actors=[actor_view(e) for e in found.entries])


@router.get(
    "/actors/{name}",
    response_model=ActorView,
    summary="One catalog entry (its ETag is its version).",
)
def get_actor(name: str, _caller: Caller, app_state: State) -> JSONResponse:
    with app_state.reader.connect() as conn:
        found = catalog.get_entry(conn, name)
    view = actor_view(found)
    return JSONResponse(view.model_dump(mode="json", by_alias=True), headers=etag(found.version))


@router.put(
    "/admin/actors/{name}",
    response_model=ActorView,
    status_code=200,
    responses={201: {"model": ActorView, "description": "Created"}},
    summary="Create (201) or replace (200) a catalog entry; each change is a new version.",
    description="The body is the whole entry. `inputSchema` must be a valid JSON Schema "
    "(draft 2020-12); a bad entry is a 422 naming the field. Sending the same entry again "
    "changes nothing (no new version). The entry is usable by `POST /runs` at once.",
)
def put_actor(
    name: Annotated[str, Path(pattern=ACTOR_NAME_PATTERN)],
    body: ActorEntry,
    admin: AdminCaller,
    app_state: State,
    if_match: IfMatch = None,
) -> JSONResponse:
    with app_state.engine.begin() as conn:
        saved = catalog.put_entry(
            conn, name, body, caller=admin, expected=expected_version(if_match)
        )
    view = actor_view(saved.saved)
    return JSONResponse(
        view.model_dump(mode="json", by_alias=True),
        status_code=201 if saved.created else 200,
        headers=etag(saved.saved.version),
    )


@router.delete(
    "/admin/actors/{name}",
    response_model=CatalogChangeView,
    summary="Remove a catalog entry (a new version); requests already made keep running.",
)
def delete_actor(
    name: str, admin: AdminCaller, app_state: State, if_match: IfMatch = None
) -> CatalogChangeView:
    with app_state.engine.begin() as conn:
        change = catalog.remove_entry(conn, name, caller=admin, expected=expected_version(if_match))
    return change_view(change)


@router.get(
    "/admin/actors/{name}/history",
    response_model=CatalogHistoryView,
    summary="Every version of one catalog entry, oldest first (deletions included).",
)
def actor_history(name: str, _admin: AdminCaller, app_state: State) -> CatalogHistoryView:
    with app_state.reader.connect() as conn:
        changes = catalog.entry_history(conn, name)
    return CatalogHistoryView(actor=name, changes=[change_view(c) for c in changes])
