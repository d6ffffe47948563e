"""Fault injection rules, per-route request statistics and the per-resource rate limiter.

All mutable test-control state lives here so the control API (`control.py`) and
the ASGI middleware share one object. Probabilistic rules draw from a seeded
`random.Random`, so a fault schedule replays identically for the same request
order; the trade-off is that concurrent requests make the order (and thus which
call gets the fault) nondeterministic — use `count` rules when that matters.
"""

from __future__ import annotations

import fnmatch
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from apify_emulator.errors import ApiError
from apify_emulator.util import new_id

ERROR_TYPES = {
    400: "invalid-input",
    401: "token-not-provided",
    402: "actor-memory-limit-exceeded",
    403: "insufficient-permissions",
    404: "record-not-found",
    408: "operation-timed-out",
    429: "rate-limit-exceeded",
    500: "internal-server-error",
    502: "internal-server-error",
    503: "query-timeout",
    504: "internal-server-error",
}
LOST_START_MODES = ("close", "hang", "error")
WEBHOOK_ACTIONS = ("drop", "delay", "duplicate")


def _check_rate(rate: Any) -> float:
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        raise ApiError.invalid("'rate' must be a number between 0 and 1")
    return float(rate)


def _check_count(count: Any) -> int | None:
    if count is None:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ApiError.invalid("'count' must be a non-negative integer or null")
    return count


def _check_retry_after(value: Any) -> int | str | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.strip() and "\n" not in value and "\r" not in value:
        return value.strip()
    raise ApiError.invalid(
        "'retryAfter' must be whole seconds (a non-negative integer), an HTTP-date string or null"
    )


@dataclass
class HttpFault:
    """Answer matching Apify calls with an error (and/or after a delay) instead of handling them."""

    method: str = "*"
    path: str = "*"  # fnmatch glob on the request path, e.g. /v2/datasets/*/items
    status: int | None = 429  # None: only delay, then handle normally
    count: int | None = 1  # remaining matching calls; None = unlimited
    rate: float = 1.0
    # camelCase fields mirror the control API JSON, so asdict() round-trips.
    delayMs: float = 0.0
    errorType: str | None = None
    message: str | None = None
    # Sent as the Retry-After header: whole seconds or an HTTP-date, verbatim (None: none).
    retryAfter: int | str | None = None
    id: str = field(default_factory=new_id)

    def matches(self, method: str, path: str) -> bool:
        return (self.method in ("*", method)) and fnmatch.fnmatchcase(path, self.path)


@dataclass
class LostStartFault:
    """The next `count` run starts create the run but the client never gets the answer."""

    count: int = 1
    mode: str = "close"  # close the connection | hang | answer 500
    path: str = "/v2/act*/*/runs"
    id: str = field(default_factory=new_id)


@dataclass
class WebhookFault:
    """Drop, delay or duplicate upcoming webhook deliveries."""

    action: str = "drop"
    count: int | None = 1
    rate: float = 1.0
    delaySecs: float = 0.0  # real seconds, not scaled
    eventTypes: list[str] | None = None
    id: str = field(default_factory=new_id)


class Faults:
    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.http: list[HttpFault] = []
        self.lost_starts: list[LostStartFault] = []
        self.webhooks: list[WebhookFault] = []
        self.injected: Counter[str] = Counter()

    # ---- construction from control-API JSON --------------------------------
    def add_http(self, body: dict[str, Any]) -> HttpFault:
        status = body.get("status", 429)
        if status is not None and (not isinstance(status, int) or not 400 <= status <= 599):
            raise ApiError.invalid("'status' must be an HTTP error status (400-599) or null")
        fault = HttpFault(
            method=str(body.get("method", "*")).upper(),
            path=str(body.get("path", "*")),
            status=status,
            count=_check_count(body.get("count", 1)),
            rate=_check_rate(body.get("rate", 1.0)),
            delayMs=float(body.get("delayMs", 0)),
            errorType=body.get("errorType"),
            message=body.get("message"),
            retryAfter=_check_retry_after(body.get("retryAfter")),
        )
        self.http.append(fault)
        return fault

    def add_lost_start(self, body: dict[str, Any]) -> LostStartFault:
        mode = body.get("mode", "close")
        if mode not in LOST_START_MODES:
            raise ApiError.invalid(f"'mode' must be one of {', '.join(LOST_START_MODES)}")
        count = _check_count(body.get("count", 1))
        fault = LostStartFault(
            count=1 if count is None else count,
            mode=mode,
            path=str(body.get("path", "/v2/act*/*/runs")),
        )
        self.lost_starts.append(fault)
        return fault

    def add_webhook(self, body: dict[str, Any]) -> WebhookFault:
        action = body.get("action", "drop")
        if action not in WEBHOOK_ACTIONS:
            raise ApiError.invalid(f"'action' must be one of {', '.join(WEBHOOK_ACTIONS)}")
        event_types = body.get("eventTypes")
        if event_types is not None and not isinstance(event_types, list):
            raise ApiError.invalid("'eventTypes' must be an array")
        fault = WebhookFault(
            action=action,
            count=_check_count(body.get("count", 1)),
            rate=_check_rate(body.get("rate", 1.0)),
            delaySecs=float(body.get("delaySecs", 0)),
            eventTypes=event_types,
        )
        self.webhooks.append(fault)
        return fault

    def describe(self) -> dict[str, Any]:
        return {
            "http": [asdict(f) for f in self.http],
            "lostStarts": [asdict(f) for f in self.lost_starts],
            "webhooks": [asdict(f) for f in self.webhooks],
        }

    def remove(self, fault_id: str) -> bool:
        before = len(self.http) + len(self.lost_starts) + len(self.webhooks)
        self.http = [f for f in self.http if f.id != fault_id]
        self.lost_starts = [f for f in self.lost_starts if f.id != fault_id]
        self.webhooks = [f for f in self.webhooks if f.id != fault_id]
        return before != len(self.http) + len(self.lost_starts) + len(self.webhooks)

    def clear(self) -> None:
        self.http.clear()
        self.lost_starts.clear()
        self.webhooks.clear()
        self.injected.clear()
        self.rng = random.Random(self.seed)

    # ---- decisions ---------------------------------------------------------
    def take_http(self, method: str, path: str) -> HttpFault | None:
        for fault in self.http:
            if fault.count == 0 or not fault.matches(method, path):
                continue
            if fault.rate < 1.0 and self.rng.random() >= fault.rate:
                continue
            if fault.count is not None:
                fault.count -= 1
            self.injected["http"] += 1
            return fault
        return None

    def take_lost_start(self, method: str, path: str) -> str | None:
        if method != "POST":
            return None
        for fault in self.lost_starts:
            if fault.count > 0 and fnmatch.fnmatchcase(path, fault.path):
                fault.count -= 1
                self.injected["lostStart"] += 1
                return fault.mode
        return None

    def take_webhook(self, event_type: str) -> list[WebhookFault]:
        """All webhook faults that apply to one delivery (e.g. delay + duplicate)."""
        chosen: list[WebhookFault] = []
        for fault in self.webhooks:
            if fault.count == 0:
                continue
            if fault.eventTypes and event_type not in fault.eventTypes:
                continue
            if fault.rate < 1.0 and self.rng.random() >= fault.rate:
                continue
            if fault.count is not None:
                fault.count -= 1
            self.injected[f"webhook.{fault.action}"] += 1
            chosen.append(fault)
        return chosen


class Stats:
    """Request counts per route template (e.g. `GET /v2/actor-runs/{runId}`) and per status."""

    def __init__(self) -> None:
        self.routes: Counter[str] = Counter()
        self.statuses: Counter[str] = Counter()
        self.webhook_calls: Counter[str] = Counter()
        self.started = time.time()

    def record(self, route: str, status: int) -> None:
        self.routes[route] += 1
        self.statuses[str(status)] += 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "since": self.started,
            "total": sum(self.routes.values()),
            "routes": dict(sorted(self.routes.items())),
            "statuses": dict(sorted(self.statuses.items())),
            "webhookCalls": dict(self.webhook_calls),
        }

    def reset(self) -> None:
        self.routes.clear()
        self.statuses.clear()
        self.webhook_calls.clear()
        self.started = time.time()


class RateLimiter:
    """Fixed one-second windows per resource (`/v2/<collection>/<id>`), as Apify limits.

    Fixed windows are cruder than a token bucket (a burst can straddle two
    windows) but need no timers and are easy to reason about in tests.
    """

    def __init__(self, rps: int, start_rps: int, retry_after_secs: int = 0) -> None:
        self.rps = rps
        self.start_rps = start_rps
        # Retry-After on its 429s (0: none, as Apify documents none).
        self.retry_after_secs = retry_after_secs
        self._windows: dict[str, tuple[int, int]] = {}

    def describe(self) -> dict[str, Any]:
        return {
            "rps": self.rps,
            "startRps": self.start_rps,
            "retryAfterSecs": self.retry_after_secs,
        }

    def update(self, body: dict[str, Any]) -> None:
        """Change limits at run time (control API); fields left out keep their value."""
        values: dict[str, int] = {}
        for name in ("rps", "startRps", "retryAfterSecs"):
            value = body.get(name, self.describe()[name])
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ApiError.invalid(f"'{name}' must be a non-negative integer")
            values[name] = value
        self.rps, self.start_rps = values["rps"], values["startRps"]
        self.retry_after_secs = values["retryAfterSecs"]
        self._windows.clear()

    def limit_for(self, method: str, path: str) -> tuple[str, int]:
        parts = path.strip("/").split("/")
        resource = "/".join(parts[:3])
        is_start = method == "POST" and len(parts) == 4 and parts[1] in ("actors", "acts")
        if is_start and parts[3] == "runs":
            return resource + "#start", self.start_rps
        return resource, self.rps

    def check(self, method: str, path: str) -> tuple[bool, int]:
        """(allowed, limit). A limit of 0 disables limiting."""
        key, limit = self.limit_for(method, path)
        if limit <= 0:
            return True, limit
        second = int(time.monotonic())
        window, count = self._windows.get(key, (second, 0))
        if window != second:
            window, count = second, 0
        count += 1
        self._windows[key] = (window, count)
        if len(self._windows) > 10_000:
            # Drop stale windows so long benchmarks don't grow this dict forever.
            self._windows = {k: v for k, v in self._windows.items() if v[0] == second}
        return count <= limit, limit
