"""``POST /webhooks/platform``: the platform's ad-hoc webhooks wake the child's poller.

The token in the header template is checked in constant time before anything else; an
unknown child, a bad or missing token or a malformed body gets a 4xx with no side effect.
A delivery is logged once per ``X-Apify-Webhook-Dispatch-Id``. The payload is never
trusted: the poller always confirms the status with the platform.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from temporalio.service import RPCError, RPCStatusCode

from orchestrator.api.deps import State
from orchestrator.api.errors import problem
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.queries.events import append_event
from orchestrator.domain.ids import poller_workflow_id
from orchestrator.platform.webhook_auth import (
    WEBHOOK_CHILD_PARAM,
    WEBHOOK_TOKEN_HEADER,
    verify_webhook_token,
)
from orchestrator.workflows.poller import PLATFORM_SIGNAL
from orchestrator.workflows.types import PlatformSignal

log = logging.getLogger(__name__)
router = APIRouter(tags=["webhooks"])

MAX_WEBHOOK_BYTES = 512 * 1024


async def _read_at_most(request: Request, limit: int) -> bytes | None:
    """The body, or None as soon as it is known to exceed ``limit`` (never buffered past it)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


@router.post(
    "/webhooks/platform",
    status_code=202,
    summary="Receiver of platform webhooks.",
    responses={
        202: {
            "description": "Recorded; the actor run's poller is woken.",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    },
    # Read by hand (the token is checked before the body is), so declared by hand.
    openapi_extra={
        "parameters": [
            {
                "name": WEBHOOK_CHILD_PARAM,
                "in": "query",
                "required": True,
                "schema": {"type": "string"},
                "description": "The actor run the webhook was registered for.",
            },
            {
                "name": WEBHOOK_TOKEN_HEADER,
                "in": "header",
                "required": True,
                "schema": {"type": "string"},
                "description": "The token the orchestrator put in the webhook's headers.",
            },
        ],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"type": "object"}}},
        },
    },
)
async def platform_webhook(request: Request, state: State) -> JSONResponse:
    child_id = request.query_params.get(WEBHOOK_CHILD_PARAM, "")
    token = request.headers.get(WEBHOOK_TOKEN_HEADER, "")
    secret = state.settings.webhook_secret.get_secret_value()
    if not child_id or not token or not verify_webhook_token(secret, child_id, token):
        log.warning("rejected a platform webhook with a missing or bad token")
        return problem(401, "unauthorized", "Unauthorized", "missing or invalid webhook token")
    body = await _read_at_most(request, MAX_WEBHOOK_BYTES)
    if body is None:
        return problem(413, "payload-too-large", "Payload too large", "webhook body is too large")
    try:
        payload: Any = json.loads(body)
    except ValueError:
        return problem(400, "malformed-body", "Malformed body", "webhook body is not JSON")
    if not isinstance(payload, dict):
        return problem(400, "malformed-body", "Malformed body", "webhook body is not an object")
    event_type = str(payload.get("eventType", ""))
    raw_resource = payload.get("resource")
    resource: dict[str, Any] = raw_resource if isinstance(raw_resource, dict) else {}
    dispatch_id = request.headers.get("X-Apify-Webhook-Dispatch-Id", "")

    named_run = resource.get("id")

    def record() -> tuple[run_queries.ChildRecord | None, bool]:
        """(child, recorded); a webhook naming another platform run is not recorded."""
        with state.engine.begin() as conn:
            child = run_queries.get_child(conn, child_id)
            if child is None:
                return None, False
            if child.platform_run_id and named_run and named_run != child.platform_run_id:
                return child, False
            append_event(
                conn,
                child.run_id,
                "child.webhook",
                f"platform webhook {event_type or '(no event type)'} received",
                child_id=child.id,
                data={
                    "eventType": event_type,
                    "dispatchId": dispatch_id,
                    "platformRunId": named_run,
                },
                dedupe_key=f"webhook:{dispatch_id}" if dispatch_id else None,
            )
            return child, True

    child, recorded = await asyncio.to_thread(record)
    if child is None:
        return problem(404, "not-found", "Not found", "no such actor run")
    if not recorded:
        log.warning("rejected a platform webhook naming another platform run")
        return problem(
            409, "run-mismatch", "Webhook for another run", "the webhook names another platform run"
        )
    if state.temporal is not None:
        try:
            await state.temporal.get_workflow_handle(poller_workflow_id(child.id)).signal(
                PLATFORM_SIGNAL, PlatformSignal(event_type=event_type, dispatch_id=dispatch_id)
            )
        except RPCError as exc:
            # The poller has already finished (or not started yet): polling covers it.
            if exc.status is not RPCStatusCode.NOT_FOUND:
                raise
    return JSONResponse({"accepted": True}, status_code=202)
