"""An in-memory platform for workflow tests: scripted runs, datasets and failures."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from temporalio import activity

from orchestrator.platform.port import (
    AccountLimits,
    ErrorKind,
    PlatformError,
    PlatformRun,
    RunWebhook,
    StartOptions,
)


@dataclass
class Script:
    """How a fake run behaves: final status after ``polls_to_finish`` reads, item count."""

    items: int = 10
    final_status: str = "SUCCEEDED"
    status_message: str | None = None
    polls_to_finish: int = 1
    start_errors: list[PlatformError] = field(default_factory=list)
    # Starts that create the run but whose answer is lost (the caller sees an error).
    lost_answers: int = 0
    # Dataset pages (by offset) that fail once, after earlier pages were served.
    failing_page_offsets: set[int] = field(default_factory=set)
    # usageTotalUsd and chargedEventCounts of the n-th status read (the last one repeats);
    # empty: the platform gives no figure.
    usage: list[float] = field(default_factory=list)
    charged: list[dict[str, int]] = field(default_factory=list)
    # The rows' own fields, row by row (each also gets its index and actor); when set, the
    # dataset has exactly these rows and ``items`` is ignored.
    rows: list[dict[str, Any]] | None = None

    def item_count(self) -> int:
        return self.items if self.rows is None else len(self.rows)


@dataclass
class FakeRun:
    id: str
    actor_id: str
    script: Script
    reads: int = 0
    aborted: bool = False
    finished_at: datetime | None = None

    def usage(self) -> tuple[float | None, dict[str, int]]:
        def nth(figures: list[Any]) -> Any:
            return figures[min(max(self.reads - 1, 0), len(figures) - 1)] if figures else None

        return nth(self.script.usage), nth(self.script.charged) or {}

    def status(self) -> str:
        if self.aborted:
            return "ABORTED"
        return self.script.final_status if self.reads >= self.script.polls_to_finish else "RUNNING"


class FakePlatform:
    def __init__(self) -> None:
        self.scripts: dict[str, Script] = {}
        self.runs: dict[str, FakeRun] = {}
        self.starts: list[tuple[str, dict[str, Any]]] = []
        self.start_options: list[StartOptions] = []
        self.page_calls = 0
        self.webhooks: list[RunWebhook] = []
        self.webhook_runs: dict[str, str] = {}
        self.lookups = 0
        # The account's limits (a 402 at them) and runs of another user of the account.
        self.max_runs = 10_000
        self.max_memory_mb = 10_000 * 1024
        self.others_active = 0
        # Runs of another user started since our last read of the limits: they take slots
        # (a 402 at the limit) but ``account_limits`` does not show them yet.
        self.others_unseen = 0
        self.peak_active = 0
        self.capacity_refusals = 0
        self.limit_reads = 0

    def active_runs(self) -> int:
        """Runs of ours the platform counts as active (started, not finished, not aborted)."""
        return sum(1 for run in self.runs.values() if run.status() == "RUNNING")

    async def account_limits(self) -> AccountLimits:
        self.limit_reads += 1
        active = self.active_runs() + self.others_active
        return AccountLimits(self.max_runs, self.max_memory_mb, active, active * 1024)

    def _view(self, run: FakeRun) -> PlatformRun:
        status = run.status()
        message = run.script.status_message if status == run.script.final_status else None
        if status != "RUNNING" and run.finished_at is None:
            run.finished_at = datetime.now(UTC)
        usage, charged = run.usage()
        return PlatformRun(
            id=run.id,
            actor_id=run.actor_id,
            status=status,
            status_message=message,
            dataset_id=f"ds-{run.id}",
            finished_at=run.finished_at,
            usage_total_usd=usage,
            charged_event_counts=charged,
        )

    async def start_run(
        self,
        actor_id: str,
        run_input: dict[str, Any],
        options: StartOptions,
        webhooks: Sequence[RunWebhook] = (),
    ) -> PlatformRun:
        script = self.scripts.get(actor_id, Script())
        if script.start_errors:
            raise script.start_errors.pop(0)
        if self.active_runs() + self.others_active + self.others_unseen >= self.max_runs:
            self.capacity_refusals += 1
            raise PlatformError(
                ErrorKind.CAPACITY,
                "By launching this job you will exceed the limit of concurrent runs",
                status_code=402,
                error_type="concurrent-runs-limit-exceeded",
            )
        run = FakeRun(id=f"run{len(self.runs)}", actor_id=actor_id, script=script)
        self.runs[run.id] = run
        self.starts.append((actor_id, run_input))
        self.start_options.append(options)
        self.peak_active = max(self.peak_active, self.active_runs())
        self.webhooks.extend(webhooks)
        for hook in webhooks:
            self.webhook_runs[hook.request_url] = run.id
        if script.lost_answers:
            script.lost_answers -= 1
            raise retryable("connection reset while reading the start answer")
        return self._view(run)

    async def find_run_by_webhook_url(self, marker: str) -> PlatformRun | None:
        self.lookups += 1
        for url, run_id in self.webhook_runs.items():
            if marker in url:
                return self._view(self.runs[run_id])
        return None

    async def get_run(self, run_id: str, *, wait_secs: int = 0) -> PlatformRun | None:
        run = self.runs.get(run_id)
        if run is None:
            return None
        run.reads += 1
        return self._view(run)

    async def abort_run(self, run_id: str, *, gracefully: bool = False) -> PlatformRun | None:
        run = self.runs.get(run_id)
        if run is None:
            return None
        run.aborted = True
        return self._view(run)

    async def dataset_page(self, dataset_id: str, offset: int, limit: int) -> list[bytes]:
        self.page_calls += 1
        run = self.runs[dataset_id.removeprefix("ds-")]
        if offset in run.script.failing_page_offsets:
            run.script.failing_page_offsets.discard(offset)
            raise retryable(f"dataset page at {offset} failed")
        end = min(run.script.item_count(), offset + limit)
        own = run.script.rows
        return [
            json.dumps(
                {"index": i, "actor": run.actor_id} | (own[i] if own is not None else {})
            ).encode()
            for i in range(offset, end)
        ]


def permanent(message: str) -> PlatformError:
    return PlatformError(ErrorKind.PERMANENT, message, status_code=400, error_type="invalid-input")


def retryable(message: str) -> PlatformError:
    return PlatformError(ErrorKind.RETRYABLE, message, status_code=503)


def hold_starts_until_cancelled(platform: FakePlatform) -> asyncio.Event:
    """Make each start wait, inside its activity, until that activity is cancelled, then
    start the run anyway (a start already on its way when the abort came); the event is
    set once a start is held."""
    start_run = platform.start_run
    entered = asyncio.Event()

    async def start_after_the_cancel(*args: Any, **kwargs: Any) -> PlatformRun:
        entered.set()
        while not activity.is_cancelled():  # runs in the activity's context
            await asyncio.sleep(0.05)
        return await start_run(*args, **kwargs)

    platform.start_run = start_after_the_cancel  # type: ignore[method-assign]
    return entered
