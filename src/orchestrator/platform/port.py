"""The platform interface and the domain view of its answers and errors.

Errors are classified once, here, into what the workflow must do about them: retry soon
(429, 5xx, network), wait for capacity (402 memory / concurrency limits) or give up
(any other 4xx, with the platform's message).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol


class ErrorKind(StrEnum):
    RETRYABLE = "retryable"
    CAPACITY = "capacity"
    PERMANENT = "permanent"


class PlatformError(Exception):
    """A platform call failed; ``kind`` says what to do about it."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        status_code: int | None = None,
        error_type: str | None = None,
        retry_after_seconds: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status_code = status_code
        self.error_type = error_type
        # A retryable error the platform said when to retry (429 ``Retry-After``), if longer
        # than the adapter waits for in process: the caller's retry should wait this long.
        self.retry_after_seconds = retry_after_seconds


@dataclass(frozen=True)
class PlatformRun:
    id: str
    actor_id: str
    status: str
    status_message: str | None
    dataset_id: str
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # What the run costs so far (``usageTotalUsd``: what the user actually pays) and, for
    # pay-per-event actors, the events charged. Preliminary until some seconds after the
    # finish; None when the platform did not say (e.g. no token).
    usage_total_usd: float | None = None
    charged_event_counts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RunWebhook:
    """An ad-hoc webhook registered with a run."""

    event_types: Sequence[str]
    request_url: str
    headers: dict[str, str] = field(default_factory=dict)
    idempotency_key: str | None = None


@dataclass(frozen=True)
class StartOptions:
    memory_mb: int | None = None
    timeout_sec: int | None = None
    build: str | None = None
    max_items: int | None = None
    max_total_charge_usd: float | None = None


@dataclass(frozen=True)
class AccountLimits:
    """The account's run limits and current use (``GET /v2/users/me/limits``), memory in MB.
    ``current`` counts every run of the account, ours and anyone else's."""

    max_concurrent_runs: int
    max_memory_mb: int
    active_runs: int
    active_memory_mb: int


class Platform(Protocol):
    async def start_run(
        self,
        actor_id: str,
        run_input: dict[str, Any],
        options: StartOptions,
        webhooks: Sequence[RunWebhook] = (),
    ) -> PlatformRun: ...

    async def get_run(self, run_id: str, *, wait_secs: int = 0) -> PlatformRun | None: ...

    async def abort_run(self, run_id: str, *, gracefully: bool = False) -> PlatformRun | None: ...

    async def dataset_page(self, dataset_id: str, offset: int, limit: int) -> list[bytes]:
        """Up to ``limit`` items from ``offset``, each as its JSON text in UTF-8 bytes (not
        decoded: rows are stored as the platform sent them)."""
        ...

    async def find_run_by_webhook_url(self, marker: str) -> PlatformRun | None:
        """The run whose ad-hoc webhook URL contains ``marker``, if one exists.

        How a start whose answer was lost is recognised: the platform has no idempotency
        key for runs, but every run we start carries a webhook URL naming its child.
        """
        ...

    async def account_limits(self) -> AccountLimits:
        """The account's concurrency and memory limits and what is in use now."""
        ...
