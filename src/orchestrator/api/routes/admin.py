"""``/admin/keys`` (admin keys only), ``/workspaces/{id}/callback-secret``,
``/workspaces/{id}/usage`` and ``/workspaces/{id}/budget`` (set by admin keys only).

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
    WorkspaceBudgetRequest,
    WorkspaceBudgetView,
    WorkspaceUsageView,
)
from orchestrator.db.queries import api_keys as key_queries
from orchestrator.db.queries.budgets import LimitStatus
from orchestrator.domain.errors import NotFound
from orchestrator.domain.spending import BudgetPeriod
from orchestrator.security.api_keys import display_key
from orchestrator.service import auth
from orchestrator.service import budgets as budget_service
from orchestrator.service.usage import MAX_USAGE_DAYS, workspace_usage
from orchestrator.service.workspaces import rotate_callback_secret

router = APIRouter(tags=["admin"])

NO_STORE = {"Cache-Control": "no-store"}


def _check_workspace_id(workspace_id: str) -> None:
    if not re.match(ID_PATTERN, workspace_id):  # never a workspace: as for a missing one
        raise NotFound(f"workspace {workspace_id} does not exist", field="workspaceId")


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
    server_key = app_state.settings.secret("callback_secret_key")

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
    _check_workspace_id(workspace_id)
    settings = app_state.settings

    def rotate() -> RotatedSecret:
        with app_state.engine.begin() as conn:
            rotated = rotate_callback_secret(
                conn,
                workspace_id,
                server_key=settings.secret("callback_secret_key"),
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
    _check_workspace_id(workspace_id)
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


def budget_view(workspace_id: str, status: LimitStatus | None) -> WorkspaceBudgetView:
    if status is None:
        return WorkspaceBudgetView(
            workspace_id=workspace_id,
            limit_usd=None,
            period=None,
            period_start=None,
            period_end=None,
            spent_usd=None,
            remaining_usd=None,
            exhausted=False,
        )
    return WorkspaceBudgetView(
        workspace_id=workspace_id,
        limit_usd=status.limit.limit_usd,
        period=status.limit.period.value,
        period_start=status.period_start,
        period_end=status.period_end,
        spent_usd=status.spent_usd,
        remaining_usd=status.remaining_usd,
        exhausted=status.exhausted,
    )


_BUDGET_RULES = (
    "While the limit is spent, `POST /runs` for the workspace answers `402 "
    "budget-exhausted` and creates nothing, and running requests are stopped "
    "(`stopReason: budget-exhausted`, every live run aborted, rows kept)."
)


@router.get(
    "/workspaces/{workspace_id}/budget",
    response_model=WorkspaceBudgetView,
    summary="The workspace's spending limit and what it spent in the current period.",
    description=_BUDGET_RULES + " A workspace key sees only its own workspace.",
)
def get_budget(workspace_id: str, caller: Caller, app_state: State) -> WorkspaceBudgetView:
    _check_workspace_id(workspace_id)
    with app_state.reader.connect() as conn:
        status = budget_service.workspace_budget(conn, workspace_id, caller=caller)
    return budget_view(workspace_id, status)


@router.put(
    "/workspaces/{workspace_id}/budget",
    response_model=WorkspaceBudgetView,
    summary="Set the workspace's spending limit per UTC day or month (admin keys only).",
    description=_BUDGET_RULES + " It applies at once, also to requests already running.",
)
def put_budget(
    workspace_id: str, body: WorkspaceBudgetRequest, _admin: AdminCaller, app_state: State
) -> WorkspaceBudgetView:
    _check_workspace_id(workspace_id)
    with app_state.engine.begin() as conn:
        status = budget_service.set_workspace_budget(
            conn, workspace_id, body.limit_usd, BudgetPeriod(body.period)
        )
    return budget_view(workspace_id, status)


@router.delete(
    "/workspaces/{workspace_id}/budget",
    response_model=WorkspaceBudgetView,
    summary="Remove the workspace's spending limit (admin keys only). Idempotent.",
)
def delete_budget(workspace_id: str, _admin: AdminCaller, app_state: State) -> WorkspaceBudgetView:
    _check_workspace_id(workspace_id)
    with app_state.engine.begin() as conn:
        budget_service.clear_workspace_budget(conn, workspace_id)
    return budget_view(workspace_id, None)
