"""The platform adapter on the official ``apify-client`` (async).

Nothing here knows about the emulator: the API URL and token come from settings.
Starting a run uses a client with no retries of its own, because the platform has no
idempotency key for starts: a retried POST whose first answer was lost would start a second
run. Every other call uses the client's built-in backoff for 429, 5xx and network errors.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import impit
from apify_client import ApifyClientAsync
from apify_client.errors import ApifyApiError, ApifyClientError
from apify_client.types import WebhookRepresentation  # type: ignore[attr-defined]

from orchestrator.platform.port import (
    AccountLimits,
    ErrorKind,
    PlatformError,
    PlatformRun,
    RunWebhook,
    StartOptions,
)

CAPACITY_ERROR_TYPES = frozenset({"actor-memory-limit-exceeded", "concurrent-runs-limit-exceeded"})


def classify_api_error(status_code: int, error_type: str | None) -> ErrorKind:
    """What a platform error status means for us (pure; unit-tested)."""
    if status_code == 429 or status_code >= 500 or status_code == 408:
        return ErrorKind.RETRYABLE
    if status_code == 402 and error_type in CAPACITY_ERROR_TYPES:
        return ErrorKind.CAPACITY
    return ErrorKind.PERMANENT


def _usd(amount: float | None) -> Decimal | None:
    """An amount as the client sends it: a Decimal from its shortest repr, so 0.1 stays 0.1."""
    return Decimal(repr(amount)) if amount is not None else None


def _translate(exc: BaseException) -> PlatformError:
    if isinstance(exc, ApifyApiError):
        kind = classify_api_error(exc.status_code, exc.type)
        return PlatformError(
            kind, str(exc.message or exc), status_code=exc.status_code, error_type=exc.type
        )
    if isinstance(exc, ApifyClientError):
        # An unreadable answer: treat as transient, the next attempt usually succeeds.
        return PlatformError(ErrorKind.RETRYABLE, f"invalid platform response: {exc}")
    return PlatformError(ErrorKind.RETRYABLE, f"platform unreachable: {type(exc).__name__}: {exc}")


_TRANSIENT = (ApifyClientError, impit.HTTPError, TimeoutError, OSError)


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _as_datetime(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).astimezone(UTC)


def _as_usd(value: Any) -> float | None:
    return None if value is None else float(value)


def _as_counts(value: Any) -> dict[str, int]:
    return {str(k): int(v) for k, v in (value or {}).items()}


def _to_run(run: Any) -> PlatformRun:
    usage = _field(run, "usage_total_usd")
    counts = _field(run, "charged_event_counts")
    return PlatformRun(
        id=str(_field(run, "id")),
        actor_id=str(_field(run, "act_id") or _field(run, "actId") or ""),
        status=str(_field(run, "status")),
        status_message=_field(run, "status_message") or _field(run, "statusMessage"),
        dataset_id=str(_field(run, "default_dataset_id") or _field(run, "defaultDatasetId")),
        started_at=_as_datetime(_field(run, "started_at") or _field(run, "startedAt")),
        finished_at=_as_datetime(_field(run, "finished_at") or _field(run, "finishedAt")),
        usage_total_usd=_as_usd(usage if usage is not None else _field(run, "usageTotalUsd")),
        charged_event_counts=_as_counts(counts or _field(run, "chargedEventCounts")),
    )


class ApifyPlatform:
    """:class:`~orchestrator.platform.port.Platform` on ``ApifyClientAsync``."""

    # How far back to look for a run whose start answer was lost.
    LOST_START_SCAN = 1000

    def __init__(
        self,
        api_url: str,
        token: str,
        *,
        max_retries: int = 4,
        start_timeout: timedelta = timedelta(seconds=30),
    ) -> None:
        self._client = ApifyClientAsync(
            token, api_url=api_url, api_public_url=api_url, max_retries=max_retries
        )
        self._start_client = ApifyClientAsync(
            token, api_url=api_url, api_public_url=api_url, max_retries=0
        )
        self._start_timeout = start_timeout
        base = api_url.rstrip("/")
        self._api_v2 = base if base.endswith("/v2") else base + "/v2"

    async def start_run(
        self,
        actor_id: str,
        run_input: dict[str, Any],
        options: StartOptions,
        webhooks: Sequence[RunWebhook] = (),
    ) -> PlatformRun:
        hooks = [
            WebhookRepresentation(
                event_types=list(hook.event_types),
                request_url=hook.request_url,
                headers_template=json.dumps(hook.headers) if hook.headers else None,
                idempotency_key=hook.idempotency_key,
            )
            for hook in webhooks
        ]
        try:
            run = await self._start_client.actor(actor_id).start(
                run_input=run_input,
                memory_mbytes=options.memory_mb,
                run_timeout=timedelta(seconds=options.timeout_sec) if options.timeout_sec else None,
                build=options.build,
                max_items=options.max_items,
                max_total_charge_usd=_usd(options.max_total_charge_usd),
                webhooks=hooks or None,
                timeout=self._start_timeout,
            )
        except _TRANSIENT as exc:
            raise _translate(exc) from None
        return _to_run(run)

    async def get_run(self, run_id: str, *, wait_secs: int = 0) -> PlatformRun | None:
        try:
            if wait_secs <= 0:
                run: Any = await self._client.run(run_id).get()
                return _to_run(run) if run is not None else None
            # One long poll: the server holds the call up to wait_secs (max 60) and answers
            # at once when the run ends. (The client's wait_for_finish() splits a wait into
            # several calls.) The client's own HTTP layer still adds auth and retries.
            response = await self._client.http_client.call(
                method="GET",
                url=f"{self._api_v2}/actor-runs/{quote(run_id, safe='')}",
                params={"waitForFinish": min(wait_secs, 60)},
                timeout=timedelta(seconds=min(wait_secs, 60) + 30),
            )
            return _to_run(json.loads(response.content)["data"])
        except ApifyApiError as exc:
            if exc.status_code == 404:
                return None
            raise _translate(exc) from None
        except _TRANSIENT as exc:
            raise _translate(exc) from None

    async def abort_run(self, run_id: str, *, gracefully: bool = False) -> PlatformRun | None:
        try:
            run = await self._client.run(run_id).abort(gracefully=gracefully)
        except ApifyApiError as exc:
            if exc.status_code == 404:
                return None
            raise _translate(exc) from None
        except _TRANSIENT as exc:
            raise _translate(exc) from None
        return _to_run(run)

    async def find_run_by_webhook_url(self, marker: str) -> PlatformRun | None:
        try:
            hooks = await self._client.webhooks().list(limit=self.LOST_START_SCAN, desc=True)
            for hook in hooks.items:
                url = str(_field(hook, "request_url") or "")
                condition = _field(hook, "condition")
                run_id = _field(condition, "actor_run_id") if condition is not None else None
                if marker in url and run_id:
                    return await self.get_run(str(run_id))
        except _TRANSIENT as exc:
            raise _translate(exc) from None
        return None

    async def dataset_page(self, dataset_id: str, offset: int, limit: int) -> list[str]:
        # JSON Lines: one item per line, so rows are stored without being decoded and
        # encoded again (about half of what an ingest would otherwise spend).
        try:
            body = await self._client.dataset(dataset_id).get_items_as_bytes(
                item_format="jsonl", offset=offset, limit=limit
            )
        except _TRANSIENT as exc:
            raise _translate(exc) from None
        return [line for line in body.decode("utf-8").split("\n") if line.strip()]

    async def account_limits(self) -> AccountLimits:
        try:
            answer = await self._client.user("me").limits()
        except _TRANSIENT as exc:
            raise _translate(exc) from None
        limits, current = answer.limits, answer.current
        return AccountLimits(
            max_concurrent_runs=int(limits.max_concurrent_actor_jobs),
            max_memory_mb=round(limits.max_actor_memory_gbytes * 1024),
            active_runs=int(current.active_actor_job_count),
            active_memory_mb=round(current.actor_memory_gbytes * 1024),
        )
