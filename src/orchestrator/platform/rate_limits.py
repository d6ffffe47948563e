"""Client-side pacing of platform API calls, and what a 429 makes us wait.

Apify limits every resource (one actor, one run, one dataset…) to 60 requests a second,
run starts to 400 a second per actor, and a user to 250 000 requests a minute; it answers
429 ``rate-limit-exceeded`` above them, documents ``X-RateLimit-Limit`` and asks clients
to back off exponentially from 500 ms (API reference, "Rate limiting"). It documents no
``Retry-After``, but the header is standard HTTP and proxies in front of the platform send
it, so when a 429 carries one we wait what it says.

Pacing uses ``aiolimiter`` leaky buckets of size one: calls to one key are spaced at least
``1/limit`` seconds apart, so no one-second window, wherever the platform draws it, ever
holds more than ``limit`` of them. A bucket sized ``limit`` would allow bursts, and a burst
straddling two of the platform's windows could reach twice the limit. The trade-off: a
burst of calls is spread over the second instead of sent at once. Limits are per process;
with N processes give each a share.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from aiolimiter import AsyncLimiter


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (RFC 9110 §10.2.3), or None.

    Either delay-seconds (a non-negative integer; a decimal is accepted too) or an
    HTTP-date, which counts from ``now`` (a date in the past means "now"). Anything else
    is ignored, as if the header were absent.
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an obsolete date form without a zone: HTTP dates are GMT
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def backoff_seconds(
    retry: int, initial: float, uniform: Callable[[float, float], float] = random.uniform
) -> float:
    """The wait before retry number ``retry`` (1-based) without a ``Retry-After``:
    random in ``[d, 2d]`` with ``d = initial * 2**(retry-1)``, as Apify documents. The
    randomness keeps clients that failed together from coming back together."""
    delay = initial * 2 ** (retry - 1)
    return uniform(delay, 2 * delay)


@dataclass(frozen=True)
class RateLimits:
    """Calls per second this process allows itself (0 turns a limit off). The defaults are
    the settings' (``PLATFORM_RATE_LIMIT_*``)."""

    per_resource: float
    run_starts: float
    overall: float


@dataclass(frozen=True)
class RetryRules:
    """How one platform call is retried in process before it fails as retryable. The
    defaults are the settings' (``PLATFORM_MAX_ATTEMPTS`` etc.)."""

    # Attempts of one call in all (the first one included).
    max_attempts: int
    backoff_initial_seconds: float
    # The longest Retry-After we wait for in process; a longer one fails the call at once
    # (retryable, carrying the wait), so a durable retry waits instead of an activity slot.
    retry_after_max_seconds: float


class _Keyed:
    """One bucket per key (a resource), created on first use and dropped when idle.

    A bucket of size one that has been idle for ``1/rate`` seconds is empty, the same as a
    new one, so dropping it changes nothing; buckets in use (acquiring) are never dropped.
    """

    SWEEP_ABOVE = 1024

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._buckets: dict[str, AsyncLimiter] = {}
        self._busy: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._buckets)

    async def acquire(self, key: str) -> None:
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self.SWEEP_ABOVE:
                self._sweep()
            bucket = self._buckets[key] = AsyncLimiter(1, 1 / self.rate)
        self._busy[key] = self._busy.get(key, 0) + 1
        try:
            await bucket.acquire()
        finally:
            left = self._busy[key] - 1
            if left:
                self._busy[key] = left
            else:
                del self._busy[key]

    def _sweep(self) -> None:
        for key, bucket in list(self._buckets.items()):
            # has_capacity() drains the bucket up to now: an idle one is empty again.
            if key not in self._busy and bucket.has_capacity():
                del self._buckets[key]


class PlatformRateLimiter:
    """The per-process limits on platform calls: one bucket per resource (per actor for
    run starts, which have their own, higher limit) and one for all calls together.

    Each call takes the overall bucket first and its resource's last, so the tighter
    per-resource spacing holds for the moment the request is sent.
    """

    def __init__(self, limits: RateLimits) -> None:
        self.limits = limits
        self._overall = AsyncLimiter(1, 1 / limits.overall) if limits.overall > 0 else None
        self._resources = _Keyed(limits.per_resource) if limits.per_resource > 0 else None
        self._starts = _Keyed(limits.run_starts) if limits.run_starts > 0 else None

    async def acquire(self, resource: str, *, start: bool = False) -> None:
        """Wait until one more call to ``resource`` is allowed (``start``: a run start of
        the actor ``resource``)."""
        if self._overall is not None:
            await self._overall.acquire()
        keyed = self._starts if start else self._resources
        if keyed is not None:
            await keyed.acquire(resource)
