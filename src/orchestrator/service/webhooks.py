"""Receiving a platform webhook: authenticate it, record it once, wake the child's poller.

The token (from the header template of the child's ad-hoc webhook) is checked in constant
time before the body is even read; an unknown child, a bad or missing token, a body that is
too large or not a JSON object, or a webhook naming another platform run is refused with no
side effect. A delivery is logged once per dispatch id. The payload is never trusted: it
only wakes the poller, which confirms the status with the platform.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from orchestrator.db.queries import runs as run_queries
from orchestrator.db.queries.events import append_event
from orchestrator.domain.errors import NotFound
from orchestrator.domain.ids import poller_workflow_id
from orchestrator.domain.lifecycle import ChildState
from orchestrator.platform.webhook_auth import verify_webhook_token
from orchestrator.service.commands import PlatformWebhook
from orchestrator.service.errors import (
    MalformedBody,
    PayloadTooLarge,
    RunMismatch,
    WebhookUnauthorized,
)
from orchestrator.workflows.poller import PLATFORM_SIGNAL
from orchestrator.workflows.types import PlatformSignal

log = logging.getLogger(__name__)

#: Largest webhook body read (the platform's payloads are a few KiB).
MAX_WEBHOOK_BYTES = 512 * 1024


@dataclass(frozen=True)
class WebhookEvent:
    """What a trusted delivery says; only ``resource.id`` is compared with our records."""

    event_type: str
    platform_run_id: str | None


def parse_webhook_body(body: bytes) -> WebhookEvent:
    try:
        payload: Any = json.loads(body)
    except ValueError:
        raise MalformedBody("webhook body is not JSON") from None
    if not isinstance(payload, dict):
        raise MalformedBody("webhook body is not an object")
    resource = payload.get("resource")
    named_run = resource.get("id") if isinstance(resource, dict) else None
    return WebhookEvent(
        event_type=str(payload.get("eventType", "")),
        platform_run_id=str(named_run) if named_run else None,
    )


def _record(engine: Engine, hook: PlatformWebhook, event: WebhookEvent) -> ChildState:
    """Log the delivery on the child (once per dispatch id), or refuse it; the child's state."""
    with engine.begin() as conn:
        child = run_queries.get_child(conn, hook.child_id)
        if child is None:
            raise NotFound("no such actor run")
        named = event.platform_run_id
        if child.platform_run_id and named and named != child.platform_run_id:
            log.warning("rejected a platform webhook naming another platform run")
            raise RunMismatch("the webhook names another platform run")
        append_event(
            conn,
            child.run_id,
            "child.webhook",
            f"platform webhook {event.event_type or '(no event type)'} received",
            child_id=child.id,
            data={
                "eventType": event.event_type,
                "dispatchId": hook.dispatch_id,
                "platformRunId": named,
            },
            dedupe_key=f"webhook:{hook.dispatch_id}" if hook.dispatch_id else None,
        )
        return child.state


async def _wake_poller(
    temporal: Client, child_id: str, event: WebhookEvent, dispatch_id: str
) -> None:
    try:
        await temporal.get_workflow_handle(poller_workflow_id(child_id)).signal(
            PLATFORM_SIGNAL, PlatformSignal(event_type=event.event_type, dispatch_id=dispatch_id)
        )
    except RPCError as exc:
        # The poller has already finished (or not started yet): polling covers it.
        if exc.status is not RPCStatusCode.NOT_FOUND:
            raise


async def receive_platform_webhook(
    engine: Engine, temporal: Client | None, secret: str, hook: PlatformWebhook
) -> None:
    """Authenticate, record and forward one delivery; raises a domain error to refuse it.

    Without Temporal the delivery is still recorded: the poller's own polling covers it.
    """
    if (
        not hook.child_id
        or not hook.token
        or not verify_webhook_token(secret, hook.child_id, hook.token)
    ):
        log.warning("rejected a platform webhook with a missing or bad token")
        raise WebhookUnauthorized("missing or invalid webhook token")
    body = await hook.read_body(MAX_WEBHOOK_BYTES)
    if body is None:
        raise PayloadTooLarge("webhook body is too large")
    event = parse_webhook_body(body)
    state = await asyncio.to_thread(_record, engine, hook, event)
    # A poller that has already seen the run end (its long poll often beats the webhook)
    # needs no waking: the signal would only cost a workflow task just as the ingest starts.
    if temporal is not None and not state.platform_run_seen_over:
        await _wake_poller(temporal, hook.child_id, event, hook.dispatch_id)
