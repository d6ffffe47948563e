"""The platform adapter on the official ``apify-client`` (async).

Nothing here knows about the emulator: the API URL and token come from settings.

Every platform request goes through one door, :meth:`ApifyPlatform._call`: it paces the
call under the per-process rate limits (``rate_limits.py``), retries it, and maps its
failure to the domain. The client's own retries are off (``max_retries=0``) because it
ignores ``Retry-After`` and its retries would bypass the pacing; a small transport
subclass reads ``Retry-After`` from 429 answers, which the client's errors drop.

429, 5xx and network errors are retried in process for every call but a start. A start
is never sent twice by the adapter, because the platform has no idempotency key for
starts: a retried POST whose first answer was lost would start a second run. Temporal
retries the start activity instead (which first looks for the run a lost attempt may have
created), and a 429's ``Retry-After`` travels on the error to become that retry's delay.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar
from urllib.parse import quote

import impit
from apify_client import ApifyClientAsync
from apify_client.errors import ApifyApiError, ApifyClientError, RateLimitError
from apify_client.http_clients import ImpitHttpClientAsync
from apify_client.types import WebhookRepresentation  # type: ignore[attr-defined]

from orchestrator.platform.port import (
    AccountLimits,
    ErrorKind,
    PlatformError,
    PlatformRun,
    RunWebhook,
    StartOptions,
)
from orchestrator.platform.rate_limits import (
    PlatformRateLimiter,
    RateLimits,
    RetryRules,
    backoff_seconds,
    parse_retry_after,
)

T = TypeVar("T")

CAPACITY_ERROR_TYPES = frozenset({"actor-memory-limit-exceeded", "concurrent-runs-limit-exceeded"})

# What one platform call did, for the "platform calls by kind and status" counter:
# observe(kind, status) once per HTTP attempt. kind is start | lookup | status | abort |
# datasetPage (the event log's names); status is "ok", the HTTP status of an error answer
# ("429", "404", "503"…), "transport" (no answer) or "invalid" (an unreadable answer).
CallObserver = Callable[[str, str], None]


def _ignore_call(kind: str, status: str) -> None:
    """The default observer: the metrics helper replaces it (see ``CallObserver``)."""


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


def _translate(exc: BaseException, *, retry_after: float | None = None) -> PlatformError:
    if isinstance(exc, ApifyApiError):
        kind = classify_api_error(exc.status_code, exc.type)
        return PlatformError(
            kind,
            str(exc.message or exc),
            status_code=exc.status_code,
            error_type=exc.type,
            retry_after_seconds=retry_after if kind is ErrorKind.RETRYABLE else None,
        )
    if isinstance(exc, ApifyClientError):
        # An unreadable answer: treat as transient, the next attempt usually succeeds.
        return PlatformError(ErrorKind.RETRYABLE, f"invalid platform response: {exc}")
    return PlatformError(ErrorKind.RETRYABLE, f"platform unreachable: {type(exc).__name__}: {exc}")


_TRANSIENT = (ApifyClientError, impit.HTTPError, TimeoutError, OSError)


class RateLimitedError(RateLimitError):
    """A 429 as the client raises it, plus the ``Retry-After`` header it would drop."""

    retry_after: str | None = None


class _RetryAfterHttpClient(ImpitHttpClientAsync):
    """apify-client's own transport, which also keeps ``Retry-After`` of a 429.

    ``send_request`` is the client's documented transport hook. Raising here (rather than
    letting the client raise its ``RateLimitError``, which keeps no headers) is safe
    because the client makes no retries of its own (``max_retries=0``).
    """

    async def send_request(
        self,
        *,
        method: str,
        url: str,
        headers: dict[str, str],
        content: bytes | AsyncIterator[bytes] | None,
        timeout: float | None,  # noqa: ASYNC109 - the client's hook signature
        stream: bool,
    ) -> impit.Response:
        response = await super().send_request(
            method=method,
            url=url,
            headers=headers,
            content=content,
            timeout=timeout,
            stream=stream,
        )
        if response.status_code == 429:
            error = RateLimitedError(response, 1, method=method)
            error.retry_after = response.headers.get("retry-after")
            raise error
        return response


def _status_label(exc: BaseException) -> str:
    if isinstance(exc, ApifyApiError):
        return str(exc.status_code)
    if isinstance(exc, ApifyClientError):
        return "invalid"
    return "transport"


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


def _utc_now() -> datetime:
    return datetime.now(UTC)


class ApifyPlatform:
    """:class:`~orchestrator.platform.port.Platform` on ``ApifyClientAsync``."""

    # How far back to look for a run whose start answer was lost.
    LOST_START_SCAN = 1000

    def __init__(
        self,
        api_url: str,
        token: str,
        *,
        start_timeout: timedelta,
        rate_limits: RateLimits,
        retry: RetryRules,
        observe: CallObserver = _ignore_call,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        now: Callable[[], datetime] = _utc_now,
        uniform: Callable[[float, float], float] = random.uniform,
    ) -> None:
        http = _RetryAfterHttpClient(token=token, max_retries=0)
        self._client = ApifyClientAsync.with_custom_http_client(
            token, api_url=api_url, api_public_url=api_url, http_client=http
        )
        self._start_timeout = start_timeout
        base = api_url.rstrip("/")
        self._api_v2 = base if base.endswith("/v2") else base + "/v2"
        self._limiter = PlatformRateLimiter(rate_limits)
        self._retry = retry
        self._observe = observe
        self._sleep = sleep
        self._now = now
        self._uniform = uniform

    async def _call(
        self,
        kind: str,
        resource: str,
        request: Callable[[], Awaitable[T]],
        *,
        start: bool = False,
    ) -> T:
        """Send one platform request: the single door every call of this adapter goes
        through.

        Each attempt first waits for the rate limiter (``resource`` is the platform's
        notion of one: an actor, a run, a dataset). A 429 is retried after its
        ``Retry-After`` (capped; a longer one fails at once, carrying the wait), else after
        Apify's exponential backoff; 5xx and network errors likewise. A start
        (``start=True``, paced under the run-start limit) is sent once: its 429 fails at
        once, carrying the ``Retry-After``. After ``max_attempts`` the error is a retryable
        :class:`PlatformError`; every other error maps to its kind at once.
        """
        rules = self._retry
        attempt = 0
        while True:
            attempt += 1
            await self._limiter.acquire(resource, start=start)
            try:
                result = await request()
            except _TRANSIENT as exc:
                self._observe(kind, _status_label(exc))
                retryable = self._retryable(exc, start=start)
                retry_after = (
                    parse_retry_after(exc.retry_after, self._now())
                    if isinstance(exc, RateLimitedError)
                    else None
                )
                if not retryable or attempt >= rules.max_attempts:
                    raise _translate(exc, retry_after=retry_after) from None
                if retry_after is None:
                    wait = backoff_seconds(attempt, rules.backoff_initial_seconds, self._uniform)
                elif retry_after <= rules.retry_after_max_seconds:
                    wait = retry_after
                else:
                    raise _translate(exc, retry_after=retry_after) from None
                await self._sleep(wait)
                continue
            except Exception:
                self._observe(kind, "error")
                raise
            self._observe(kind, "ok")
            return result

    def _retryable(self, exc: BaseException, *, start: bool) -> bool:
        """Whether ``_call`` may send the request again after ``exc``."""
        if start:
            # Only the start activity resends a start, after looking for the run a lost
            # answer may have created; each refusal stays visible as its own spawn error.
            return False
        if isinstance(exc, ApifyApiError):
            return exc.status_code == 429 or exc.status_code >= 500
        if isinstance(exc, ApifyClientError):
            return False  # an unreadable answer is left to the activity's retry
        if isinstance(exc, impit.HTTPError):
            return self._client.http_client.is_retryable_transport_error(exc)
        return True  # TimeoutError, OSError: no answer came

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
        run = await self._call(
            "start",
            f"actors/{actor_id}",
            lambda: self._client.actor(actor_id).start(
                run_input=run_input,
                memory_mbytes=options.memory_mb,
                run_timeout=timedelta(seconds=options.timeout_sec) if options.timeout_sec else None,
                build=options.build,
                max_items=options.max_items,
                max_total_charge_usd=_usd(options.max_total_charge_usd),
                webhooks=hooks or None,
                timeout=self._start_timeout,
            ),
            start=True,
        )
        return _to_run(run)

    async def get_run(self, run_id: str, *, wait_secs: int = 0) -> PlatformRun | None:
        async def read() -> Any:
            if wait_secs <= 0:
                return await self._client.run(run_id).get()
            # One long poll: the server holds the call up to wait_secs (max 60) and answers
            # at once when the run ends. (The client's wait_for_finish() splits a wait into
            # several calls.) The client's own HTTP layer still adds auth.
            response = await self._client.http_client.call(
                method="GET",
                url=f"{self._api_v2}/actor-runs/{quote(run_id, safe='')}",
                params={"waitForFinish": min(wait_secs, 60)},
                timeout=timedelta(seconds=min(wait_secs, 60) + 30),
            )
            return json.loads(response.content)["data"]

        try:
            run = await self._call("status", f"actor-runs/{run_id}", read)
        except PlatformError as exc:
            if exc.status_code == 404:
                return None
            raise
        return _to_run(run) if run is not None else None

    async def abort_run(self, run_id: str, *, gracefully: bool = False) -> PlatformRun | None:
        try:
            run = await self._call(
                "abort",
                f"actor-runs/{run_id}",
                lambda: self._client.run(run_id).abort(gracefully=gracefully),
            )
        except PlatformError as exc:
            if exc.status_code == 404:
                return None
            raise
        return _to_run(run)

    async def find_run_by_webhook_url(self, marker: str) -> PlatformRun | None:
        hooks = await self._call(
            "lookup",
            "webhooks",
            lambda: self._client.webhooks().list(limit=self.LOST_START_SCAN, desc=True),
        )
        for hook in hooks.items:
            url = str(_field(hook, "request_url") or "")
            condition = _field(hook, "condition")
            run_id = _field(condition, "actor_run_id") if condition is not None else None
            if marker in url and run_id:
                return await self.get_run(str(run_id))
        return None

    async def dataset_page(self, dataset_id: str, offset: int, limit: int) -> list[bytes]:
        # JSON Lines: one item per line, so rows are stored as the bytes that came, without
        # being decoded and encoded again (about half of what an ingest would otherwise spend).
        body = await self._call(
            "datasetPage",
            f"datasets/{dataset_id}",
            lambda: self._client.dataset(dataset_id).get_items_as_bytes(
                item_format="jsonl", offset=offset, limit=limit
            ),
        )
        return [line for line in body.split(b"\n") if line and not line.isspace()]

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
