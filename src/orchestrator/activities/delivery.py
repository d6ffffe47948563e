"""Activity ``deliver_callback``: one signed attempt to tell the caller its request ended.

Each activity attempt is one HTTP attempt, so Temporal's retry policy
(``policies.CALLBACK_RETRY``) is the retry loop and a worker crash loses nothing. Every
attempt builds the body from the database (the same bytes each time: the run is terminal),
signs it afresh (new ``webhook-timestamp``, same ``webhook-id``), sends it through
``CallbackSender`` (URL and resolved addresses checked again, redirects not followed), and
appends a ``callback.attempt`` event with the outcome. Then:

* delivered → a one-off ``callback.delivered`` event; a later retry of the same activity
  (its completion was lost) sees it and sends nothing;
* permanent (4xx other than 408/429, 3xx, an unsafe URL) or the last attempt → a one-off
  ``callback.failed`` event and a non-retryable ``ApplicationError``;
* retryable → an ``ApplicationError`` with ``next_retry_delay``: the schedule's wait for
  this attempt, or the receiver's ``Retry-After`` if longer.

Trade-off: secrets are derived per attempt from the workspace's current nonces, so a
rotation takes effect even for a callback already being retried. Events and logs carry the
status code, the error class and ``scheme://host[:port]`` only - never the secret, the
signature, the path or the query of the URL.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection
from temporalio import activity
from temporalio.exceptions import ApplicationError

from orchestrator.activities.deps import ActivityConfig, ActivityDeps
from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries import row_deliveries as row_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.queries.row_deliveries import RowDelivery
from orchestrator.db.queries.runs import ChildRecord, RunRecord
from orchestrator.delivery.sender import CALLBACK_RETRY_SCHEDULE, CallbackSender, DeliveryOutcome
from orchestrator.delivery.signing import callback_message_id, signed_headers_for_all
from orchestrator.delivery.url_guard import url_for_log
from orchestrator.domain.lifecycle import ChildState
from orchestrator.domain.row_push import DELIVER_ROWS_CALLBACK
from orchestrator.observability import metrics
from orchestrator.service.workspaces import signing_secrets
from orchestrator.workflows.policies import ERR_CALLBACK_PERMANENT
from orchestrator.workflows.types import DeliverCallbackInput, DeliverCallbackResult

log = logging.getLogger(__name__)

CALLBACK_EVENT_TYPE = "scrape.run.finished"
_FAILED_CHILD_STATES = (ChildState.FAILED, ChildState.TIMED_OUT, ChildState.ABORTED)


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z") if value else None


def callback_payload(
    run: RunRecord,
    children: list[ChildRecord],
    public_url: str,
    *,
    usage_total_usd: float = 0.0,
    pushed: Mapping[str, RowDelivery] | None = None,
) -> dict[str, Any]:
    """The JSON summary POSTed to the caller (Standard Webhooks' ``{type, timestamp, data}``);
    ``usage_total_usd`` is the request's spend (``runs.run_usage_total``). With ``pushed``
    (the request pushes its rows: each child's delivery cursor) every child says how many
    batches and rows were pushed to the callback."""
    base = public_url.rstrip("/")
    payload: dict[str, Any] = {
        "type": CALLBACK_EVENT_TYPE,
        "timestamp": _iso(run.finished_at or run.updated_at),
        "data": {
            "runId": run.id,
            "workspaceId": run.workspace_id,
            "skillId": run.skill_run_id,
            "conversationId": run.conversation_id,
            "state": run.state.value,
            "aborted": run.aborted,
            "createdAt": _iso(run.created_at),
            "finishedAt": _iso(run.finished_at),
            "itemsTotal": sum(c.items_ingested for c in children),
            "usageTotalUsd": usage_total_usd,
            "budgetUsd": run.budget_usd,
            "stopReason": run.stop_reason,
            "stopMessage": run.stop_message,
            "children": [
                {
                    "childId": c.id,
                    "index": c.idx,
                    "actor": c.actor,
                    "state": c.state.value,
                    "platformStatus": c.platform_status,
                    "itemCount": c.items_ingested,
                    "partial": c.partial,
                    "failureReason": c.status_message if c.state in _FAILED_CHILD_STATES else None,
                    "usageTotalUsd": c.usage_total_usd,
                    "chargedEventCounts": c.charged_event_counts,
                    "usageSettled": c.usage_settled_at is not None,
                }
                for c in children
            ],
            "links": {
                "run": f"{base}/runs/{run.id}",
                "items": f"{base}/runs/{run.id}/items",
                "events": f"{base}/runs/{run.id}/events",
            },
        },
    }
    if pushed is not None:
        for child, view in zip(children, payload["data"]["children"], strict=True):
            view["rowsPushed"] = rows_pushed_view(pushed.get(child.id), child.items_ingested)
    return payload


def rows_pushed_view(cursor: RowDelivery | None, items: int) -> dict[str, Any]:
    """What a summary says of one child's pushed rows: batches and rows acknowledged, the
    rows there were to push, and whether every one of them was (``complete``)."""
    if cursor is None:  # never pushed: it stored no rows, or it ended without a poller
        return {
            "batches": 0,
            "rows": 0,
            "rowsTotal": items,
            "complete": items == 0,
            "failedBatchSeq": None,
        }
    return {
        "batches": cursor.batches_pushed,
        "rows": cursor.rows_pushed,
        "rowsTotal": cursor.rows_total,
        "complete": cursor.rows_pushed >= cursor.rows_total,
        "failedBatchSeq": cursor.failed_seq,
    }


async def send_attempt(
    config: ActivityConfig, attempt: int, url: str, body: bytes, headers: dict[str, str]
) -> tuple[DeliveryOutcome, bool, float | None]:
    """One signed POST to a caller's URL (the summary callback, or a batch of rows): what
    happened, whether it is final (delivered, refused for good, or out of attempts), and
    when to try again otherwise (the schedule, or the receiver's Retry-After)."""
    async with CallbackSender() as sender:
        outcome = await sender.send(
            url, body, headers, allow_insecure_localhost=config.allow_insecure_callback_localhost
        )
    last = attempt >= CALLBACK_RETRY_SCHEDULE.maximum_attempts
    final = not outcome.delivered and (not outcome.retryable or last)
    metrics.observe_callback_attempt(outcome.delivered, final)
    retry_in = (
        retry_delay_seconds(
            attempt, config.callback_retry_initial_seconds, outcome.retry_after_seconds
        )
        if not outcome.delivered and not final
        else None
    )
    return outcome, final, retry_in


def retry_delay_seconds(attempt: int, initial_seconds: float, retry_after: float | None) -> float:
    """Wait before the attempt after ``attempt``: the schedule (scaled to ``initial_seconds``)
    or the receiver's Retry-After, whichever is longer."""
    schedule = CALLBACK_RETRY_SCHEDULE
    scale = initial_seconds / schedule.initial_interval_seconds
    wait = min(
        initial_seconds * schedule.backoff_coefficient ** max(attempt - 1, 0),
        schedule.maximum_interval_seconds * scale,
    )
    return max(wait, retry_after or 0.0)


@dataclass(frozen=True)
class _Prepared:
    url: str
    body: bytes
    message_id: str
    secrets: list[str]


class DeliveryActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self._deps = deps

    def _prepare(self, conn: Connection, run_id: str, now: datetime) -> _Prepared | None:
        run = run_queries.get_run(conn, run_id)
        if run is None or not run.callback_url or not run.terminal:
            return None
        if event_queries.event_exists(conn, f"{run_id}:callback:delivered"):
            return None
        children = run_queries.get_children(conn, run_id)
        payload = callback_payload(
            run,
            children,
            self._deps.config.public_url,
            usage_total_usd=run_queries.run_usage_total(conn, run_id),
            pushed=row_queries.deliveries_of_run(conn, run_id)
            if run.deliver_rows == DELIVER_ROWS_CALLBACK
            else None,
        )
        return _Prepared(
            url=run.callback_url,
            body=json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8"),
            message_id=callback_message_id(run.id, run.state.value),
            secrets=signing_secrets(
                conn, run.workspace_id, server_key=self._deps.config.callback_secret_key, now=now
            ),
        )

    def _record(
        self,
        conn: Connection,
        run_id: str,
        attempt: int,
        prepared: _Prepared,
        outcome: DeliveryOutcome,
        retry_in: float | None,
        final: bool,
    ) -> None:
        data: dict[str, Any] = {
            "attempt": attempt,
            "webhookId": prepared.message_id,
            "target": url_for_log(prepared.url),
            "delivered": outcome.delivered,
            "statusCode": outcome.status_code,
            "retryable": outcome.retryable and not final,
            "error": outcome.error,
        }
        if retry_in is not None:
            data["retryInSeconds"] = round(retry_in, 3)
        if outcome.delivered:
            message = f"callback attempt {attempt}: delivered (HTTP {outcome.status_code})"
        else:
            message = f"callback attempt {attempt}: {outcome.error}"
        event_queries.append_event(conn, run_id, "callback.attempt", message, data=data)
        if outcome.delivered:
            event_queries.append_event(
                conn,
                run_id,
                "callback.delivered",
                f"callback delivered after {attempt} attempt(s)",
                data={"attempts": attempt, "webhookId": prepared.message_id},
                dedupe_key=f"{run_id}:callback:delivered",
            )
        elif final:
            event_queries.append_event(
                conn,
                run_id,
                "callback.failed",
                f"callback abandoned after {attempt} attempt(s): {outcome.error}",
                data={"attempts": attempt, "webhookId": prepared.message_id},
                dedupe_key=f"{run_id}:callback:failed",
            )

    @activity.defn(name="deliver_callback")
    async def deliver_callback(self, params: DeliverCallbackInput) -> DeliverCallbackResult:
        attempt = activity.info().attempt
        now = datetime.now(UTC)
        prepared = await self._deps.tx(self._prepare, params.run_id, now)
        if prepared is None:
            return DeliverCallbackResult(run_id=params.run_id, delivered=True, attempts=attempt)
        headers = signed_headers_for_all(prepared.secrets, prepared.message_id, now, prepared.body)
        outcome, final, retry_in = await send_attempt(
            self._deps.config, attempt, prepared.url, prepared.body, headers
        )
        await self._deps.tx(
            self._record, params.run_id, attempt, prepared, outcome, retry_in, final
        )
        if outcome.delivered:
            return DeliverCallbackResult(
                run_id=params.run_id,
                delivered=True,
                attempts=attempt,
                status_code=outcome.status_code,
            )
        if final:
            raise ApplicationError(
                f"callback not delivered: {outcome.error}",
                type=ERR_CALLBACK_PERMANENT,
                non_retryable=True,
            )
        assert retry_in is not None
        raise ApplicationError(
            f"callback attempt {attempt} failed: {outcome.error}",
            next_retry_delay=timedelta(seconds=retry_in),
        )
