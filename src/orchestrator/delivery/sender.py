"""Sending one signed callback attempt, and how to classify the answer.

Owns one HTTP attempt: re-check the URL (``check_callback_url``) and the resolved addresses
(``resolve_and_check``) right before sending, POST the exact signed bytes without following
redirects, and turn the result into a ``DeliveryOutcome`` that says whether a retry makes
sense. Retrying itself belongs to the Temporal activity that calls this (one attempt per
activity attempt, a fresh ``webhook-timestamp`` and signature each time, the same
``webhook-id``): raise a non-retryable ``ApplicationError`` when ``retryable`` is false, and
pass ``retry_after_seconds`` as ``next_retry_delay`` when it is set.

Retry schedule (``CALLBACK_RETRY_SCHEDULE``, plain numbers so this module does not import
temporalio): first retry after 5 s, doubling, capped at 1 h, 33 attempts in all. The waits
are 5 s, 10 s, ... 2560 s (about 85 min in total for the first ten), then 22 waits of 1 h:
about 23.4 h from the first attempt to the last, in line with Svix's ~27 h and shorter than
Standard Webhooks' ~75 h example.

Classification (``classify_response``, pure): 2xx delivered; 408, 429 and 5xx retryable;
everything else permanent - 3xx included (the spec calls a redirect a failure and following
one would bypass the SSRF guard), and 410, which also tells the caller to stop using the URL.
Network errors and timeouts are retryable; an unsafe URL is permanent.

Trade-off / residual risk: the addresses are checked, but httpx resolves the name again when
it connects, so a hostile DNS server can still answer a private address in between (a
time-of-check/time-of-use gap). Pinning the connection to the checked address while keeping
the Host header and TLS SNI right needs a custom httpcore network backend; that is not done
here. Deployments that need more should route callbacks through an egress proxy that
filters internal addresses (e.g. smokescreen) and keep workers in a subnet without access to
internal services. The client is built with ``trust_env=False`` so environment proxies and
``.netrc`` credentials are never sent to caller-chosen hosts.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Final, Self

import httpx

from orchestrator.delivery.url_guard import (
    Resolver,
    UnsafeCallbackUrl,
    check_callback_url,
    resolve_and_check,
    url_for_log,
)

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_SECONDS: Final = 5.0
#: Whole-attempt budget (DNS + connect + send + response head); the spec suggests 15-30 s.
TOTAL_TIMEOUT_SECONDS: Final = 15.0
#: A receiver's Retry-After is honoured up to this long, the schedule's longest interval.
MAX_RETRY_AFTER_SECONDS: Final = 3600.0
USER_AGENT: Final = "scraper-orchestrator-callbacks/1"


@dataclass(frozen=True, slots=True)
class RetrySchedule:
    """Exponential backoff in the terms of a Temporal ``RetryPolicy``."""

    initial_interval_seconds: float
    backoff_coefficient: float
    maximum_interval_seconds: float
    #: Counts the first attempt, as Temporal's ``maximum_attempts`` does.
    maximum_attempts: int

    def waits(self) -> list[float]:
        """The pauses between consecutive attempts (``maximum_attempts - 1`` of them)."""
        return [
            min(
                self.initial_interval_seconds * self.backoff_coefficient**n,
                self.maximum_interval_seconds,
            )
            for n in range(self.maximum_attempts - 1)
        ]

    def total_wait_seconds(self) -> float:
        """Time from the first attempt to the last, ignoring the attempts' own duration."""
        return sum(self.waits())


CALLBACK_RETRY_SCHEDULE: Final = RetrySchedule(
    initial_interval_seconds=5.0,
    backoff_coefficient=2.0,
    maximum_interval_seconds=3600.0,
    maximum_attempts=33,
)


@dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    """What one attempt achieved. ``error`` never contains the URL or any secret."""

    delivered: bool
    status_code: int | None
    retryable: bool
    error: str | None
    retry_after_seconds: float | None = None


def classify_response(status: int) -> tuple[bool, bool]:
    """``(delivered, retryable)`` for an HTTP status code."""
    if 200 <= status <= 299:
        return True, False
    if status in (408, 429) or 500 <= status <= 599:
        return False, True
    # 1xx/3xx/other 4xx (410 Gone included): the same request will not succeed later.
    return False, False


_DELTA_SECONDS_RE: Final = re.compile(r"^[0-9]{1,10}$")


def parse_retry_after(
    value: str | None, *, now: datetime, cap: float = MAX_RETRY_AFTER_SECONDS
) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delay-seconds or HTTP-date), capped.

    Returns None when absent or unparseable; a date in the past gives 0.
    """
    if value is None:
        return None
    value = value.strip()
    if _DELTA_SECONDS_RE.match(value):
        return min(float(value), cap)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" zone: HTTP-dates are GMT anyway
        when = when.replace(tzinfo=UTC)
    return min(max((when - now).total_seconds(), 0.0), cap)


def _failure(error: str, *, retryable: bool) -> DeliveryOutcome:
    return DeliveryOutcome(delivered=False, status_code=None, retryable=retryable, error=error)


class CallbackSender:
    """Sends single callback attempts over an ``httpx.AsyncClient``.

    Give it a shared client (it will not close it) or let it build one with the timeouts
    above; use it as an async context manager or call ``aclose`` in the latter case.
    ``resolver`` replaces DNS for the address check (tests use it).
    """

    def __init__(
        self,
        client: httpx.AsyncClient | None = None,
        *,
        resolver: Resolver | None = None,
        total_timeout_seconds: float = TOTAL_TIMEOUT_SECONDS,
        connect_timeout_seconds: float = CONNECT_TIMEOUT_SECONDS,
    ) -> None:
        self._owns_client = client is None
        self._client = (
            client
            if client is not None
            else httpx.AsyncClient(
                timeout=httpx.Timeout(total_timeout_seconds, connect=connect_timeout_seconds),
                follow_redirects=False,
                trust_env=False,
                headers={"user-agent": USER_AGENT},
            )
        )
        self._resolver = resolver
        self._total_timeout = total_timeout_seconds

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client if this sender created it."""
        if self._owns_client:
            await self._client.aclose()

    async def send(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        allow_insecure_localhost: bool = False,
    ) -> DeliveryOutcome:
        """POST ``body`` with ``headers`` to ``url`` once and classify the result.

        Never raises for delivery problems: unsafe URLs, HTTP errors, network errors and
        timeouts all come back as a ``DeliveryOutcome``.
        """
        try:
            target = check_callback_url(url, allow_insecure_localhost=allow_insecure_localhost)
        except UnsafeCallbackUrl as exc:
            logger.warning("callback refused: unsafe URL (%s)", exc.reason)
            return _failure(f"unsafe callback URL: {exc.reason}", retryable=False)
        where = url_for_log(target)
        try:
            response = await self._post(
                target, body, headers, allow_insecure_localhost=allow_insecure_localhost
            )
        except (UnsafeCallbackUrl, httpx.InvalidURL, httpx.HTTPError, OSError) as exc:
            return _attempt_failed(exc, where)
        return _answered(response, where)

    async def _post(
        self,
        target: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        allow_insecure_localhost: bool,
    ) -> httpx.Response:
        """Check the resolved address, then POST; all of it within the total timeout."""
        async with asyncio.timeout(self._total_timeout):
            parsed = httpx.URL(target)
            port = parsed.port or (443 if parsed.scheme == "https" else 80)
            await resolve_and_check(
                parsed.host,
                port,
                resolver=self._resolver,
                allow_insecure_localhost=allow_insecure_localhost,
            )
            request = self._client.build_request("POST", target, content=body, headers=headers)
            # Stream so only the status line and headers are read: a hostile receiver
            # cannot make us buffer a huge body.
            response = await self._client.send(request, stream=True, follow_redirects=False)
            await response.aclose()
        return response


def _attempt_failed(exc: Exception, where: str) -> DeliveryOutcome:
    """The outcome of an attempt that got no HTTP answer (checked most specific first)."""
    if isinstance(exc, UnsafeCallbackUrl):
        logger.warning("callback to %s refused: %s", where, exc.reason)
        return _failure(f"unsafe callback URL: {exc.reason}", retryable=False)
    if isinstance(exc, httpx.InvalidURL):  # not expected after canonicalisation; fail closed
        logger.warning("callback to %s refused: URL rejected by the HTTP client", where)
        return _failure("unsafe callback URL: URL is malformed", retryable=False)
    if isinstance(exc, (TimeoutError, httpx.TimeoutException)):
        logger.warning("callback to %s timed out", where)
        return _failure("timed out", retryable=True)
    if isinstance(exc, httpx.HTTPError):
        # The class name only: httpx messages can quote the request URL.
        logger.warning("callback to %s failed: %s", where, type(exc).__name__)
        return _failure(f"network error ({type(exc).__name__})", retryable=True)
    # DNS resolution failure (socket.gaierror) or an empty answer.
    logger.warning("callback to %s: name resolution failed (%s)", where, type(exc).__name__)
    return _failure("could not resolve host", retryable=True)


def _answered(response: httpx.Response, where: str) -> DeliveryOutcome:
    """The outcome of an attempt the receiver answered."""
    delivered, retryable = classify_response(response.status_code)
    retry_after = (
        parse_retry_after(response.headers.get("retry-after"), now=datetime.now(UTC))
        if retryable
        else None
    )
    if delivered:
        logger.info("callback to %s delivered (%d)", where, response.status_code)
        error = None
    else:
        logger.warning(
            "callback to %s answered %d (retryable=%s)", where, response.status_code, retryable
        )
        error = f"HTTP {response.status_code}"
        if 300 <= response.status_code <= 399:
            error += " (redirects are not followed)"
    return DeliveryOutcome(
        delivered=delivered,
        status_code=response.status_code,
        retryable=retryable,
        error=error,
        retry_after_seconds=retry_after,
    )
