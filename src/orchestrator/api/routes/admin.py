"""``/admin/keys`` (admin keys only), ``/workspaces/{id}/callback-secret`` and
``/workspaces/{id}/usage``.

Secrets (a new API key, a callback secret) appear in exactly one response each, the one
that created them, marked ``Cache-Control: no-store``; listings show key ids only.
"""

from __future__ import annotations

import asyncio
import re
from datetime import date, timedelta
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from orchestrator.api.auth import AdminCaller, Caller
from orchestrator.api.deps import State
from orchestrator.api.schemas import (
    ID_PATTERN,
    ActorUsageView,
    CreatedKey,
    CreateKeyRequest,
    DayUsageView,
    KeyList,
    KeyView,
    RotatedSecret,
    WorkspaceUsageView,
)
from orchestrator.db.queries import api_keys as key_queries
from orchestrator.domain.errors import NotFound
from orchestrator.security.api_keys import display_key
from orchestrator.service import auth
from orchestrator.service.usage import MAX_USAGE_DAYS, workspace_usage
from orchestrator.service.workspaces import rotate_callback_secret

router = APIRouter(tags=["admin"])

NO_STORE = {"Cache-Control": "no-store"}


def key_view(record: key_queries.ApiKeyRecord) -> KeyView:
    return KeyView(
        key_id=record.id,
        display=display_key(record.id),
        workspace_id=record.workspace_id,
        admin=record.admin,
        name=record.name,
        created_at=record.created_at,
        revoked_at=record.revoked_at,
        last_used_at=record.last_used_at,
    )


@router.post(
    "/admin/keys",
    status_code=201,
    response_model=CreatedKey,
    summary="Create an API key (workspace-scoped, or admin when workspaceId is null).",
)
async def create_key(body: CreateKeyRequest, _admin: AdminCaller, app_state: State) -> JSONResponse:
    server_key = app_state.settings.callback_secret_key.get_secret_value()

    def create() -> auth.CreatedKey:
        with app_state.engine.begin() as conn:
            return auth.create_key(
                conn,
                workspace_id=body.workspace_id,
                name=body.name,
                callback_secret_key=server_key,
            )

    created = await asyncio.to_thread(create)
    view = CreatedKey(
        **key_view(created.record).model_dump(),
        api_key=created.plaintext,
        callback_secret=created.callback_secret,
    )
    return JSONResponse(
        view.model_dump(mode="json", by_alias=True), status_code=201, headers=NO_STORE
    )


@router.get(
    "/admin/keys",
    response_model=KeyList,
    summary="List API keys (ids and metadata only; never the keys).",
)
def list_keys(
    _admin: AdminCaller,
    app_state: State,
    workspace_id: Annotated[str | None, Query(alias="workspaceId")] = None,
) -> KeyList:
    with app_state.reader.connect() as conn:
        records = key_queries.list_keys(conn, workspace_id=workspace_id)
    return KeyList(keys=[key_view(r) for r in records])


@router.delete(
    "/admin/keys/{key_id}",
    response_model=KeyView,
    summary="Revoke an API key; it stops working at once. Idempotent.",
)
def revoke_key(key_id: str, _admin: AdminCaller, app_state: State) -> KeyView:
    with app_state.engine.begin() as conn:
        return key_view(auth.revoke_key(conn, key_id))


@router.post(
    "/workspaces/{workspace_id}/callback-secret",
    response_model=RotatedSecret,
    summary="Rotate the workspace's callback signing secret; the new one is shown once.",
    description="For a grace period (24 h by default) callbacks carry two signatures, one "
    "with the new secret and one with the previous, so receivers can switch without "
    "missing a callback.",
)
async def rotate_secret(workspace_id: str, caller: Caller, app_state: State) -> JSONResponse:
    if not re.match(ID_PATTERN, workspace_id):  # never a workspace: as for a missing one
        raise NotFound(f"workspace {workspace_id} does not exist", field="workspaceId")
    settings = app_state.settings

    def rotate() -> RotatedSecret:
        with app_state.engine.begin() as conn:
            rotated = rotate_callback_secret(
                conn,
                workspace_id,
                server_key=settings.callback_secret_key.get_secret_value(),
                grace=timedelta(seconds=settings.callback_secret_grace_seconds),
                caller=caller,
            )
        return RotatedSecret(
            workspace_id=rotated.workspace_id,
            callback_secret=rotated.callback_secret,
            rotated_at=rotated.rotated_at,
            previous_valid_until=rotated.previous_valid_until,
        )

    view = await asyncio.to_thread(rotate)
    return JSONResponse(view.model_dump(mode="json", by_alias=True), headers=NO_STORE)


@router.get(
    "/workspaces/{workspace_id}/usage",
    response_model=WorkspaceUsageView,
    summary="What the workspace's platform runs cost, per UTC day and actor.",
    description="Each actor run counts on the UTC day it finished (the day it started while "
    "it still runs), with the platform's `usageTotalUsd`; `unsettled` counts runs whose "
    f"figure may still grow. `from` and `to` are inclusive, at most {MAX_USAGE_DAYS} days. "
    "A workspace key sees only its own workspace (another one is a 404); admin keys any.",
)
def get_usage(
    workspace_id: str,
    caller: Caller,
    app_state: State,
    start: Annotated[date, Query(alias="from", description="First UTC day (ISO date).")],
    end: Annotated[date, Query(alias="to", description="Last UTC day (ISO date), inclusive.")],
) -> WorkspaceUsageView:
    if not re.match(ID_PATTERN, workspace_id):  # never a workspace: as for a missing one
        raise NotFound(f"workspace {workspace_id} does not exist", field="workspaceId")
    with app_state.reader.connect() as conn:
        usage = workspace_usage(conn, workspace_id, start, end, caller=caller)
    return WorkspaceUsageView(
        workspace_id=usage.workspace_id,
        from_=usage.start,
        to=usage.end,
        usage_total_usd=usage.usage_total_usd,
        days=[
            DayUsageView(
                day=day.day,
                usage_total_usd=day.usage_total_usd,
                actors=[
                    ActorUsageView(
                        actor=a.actor,
                        usage_total_usd=a.usage_total_usd,
                        runs=a.runs,
                        unsettled=a.unsettled,
                        charged_event_counts=a.charged_event_counts,
                    )
                    for a in day.actors
                ],
            )
            for day in usage.days
        ],
    )
