"""Every metric the orchestrator's processes count, with its labels (prometheus_client).

Counters and histograms that code increments live here, in one registry of their own
(``PROCESS``), not the library's global one: each composition root builds its scrape
registry from ``PROCESS`` plus its own collectors, so an app factory called twice (tests)
never registers a name twice. The objects are created at import, as the library intends:
they hold no settings and no connection, only this process's running totals.

Counted where the thing happens, once per committed effect (a page of rows after its
transaction, a settled usage after its write), so a retried activity that resumes after a
committed step does not count that step again. Figures are per process: sum them over the
workers (docs/OPERATIONS.md says which series to sum).

Labels stay few and bounded: ``actor`` (the catalog's logical names), ``outcome``,
``kind`` and ``status`` (small fixed sets). Workspaces appear only in the scrape-time
gauges of ``collectors``, which report what exists now.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram

#: The registry of this process's counters; composition roots collect it (``exposition``).
PROCESS: Final = CollectorRegistry(auto_describe=True)

#: Rows stored in ``scrape_items`` by the ingest activity, per logical actor.
ROWS_INGESTED: Final = Counter(
    "orchestrator_rows_ingested",
    "Dataset rows stored by the ingest activity (counted per committed page).",
    ["actor"],
    registry=PROCESS,
)

#: Buckets from a tiny dataset (well under a second) to a million rows (minutes).
COMPLETION_TO_ROWS_BUCKETS: Final = (
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
)

#: From the moment the orchestrator learned a run ended (the child's ``ingesting``
#: transition, by webhook or poll) to the last of its rows stored.
COMPLETION_TO_ROWS: Final = Histogram(
    "orchestrator_completion_to_rows_seconds",
    "Seconds from a child's run ending (seen by webhook or poll) to its last row stored.",
    buckets=COMPLETION_TO_ROWS_BUCKETS,
    registry=PROCESS,
)

#: Calls to the platform API: ``kind`` is the operation (start, get_run, abort,
#: dataset_page, ...), ``status`` the HTTP status code, or ``error`` when none came back.
#: Wired at the platform adapter's single choke point (``platform/apify.py``).
PLATFORM_CALLS: Final = Counter(
    "orchestrator_platform_calls",
    "Platform API calls (each HTTP attempt) by operation and outcome: 'ok', the HTTP status "
    "of an error answer, 'transport' (no answer) or 'invalid' (an unreadable answer).",
    ["kind", "status"],
    registry=PROCESS,
)

#: Signed POSTs to a caller's callback URL (the summary callback and pushed row batches):
#: ``delivered``, ``retry`` (will be tried again) or ``failed`` (given up).
CALLBACK_ATTEMPTS: Final = Counter(
    "orchestrator_callback_attempts",
    "Signed POSTs to callers' callback URLs, by outcome (delivered, retry, failed).",
    ["outcome"],
    registry=PROCESS,
)

#: What settled runs cost on the platform (``usageTotalUsd`` once final), per actor.
SPEND_USD: Final = Counter(
    "orchestrator_spend_usd",
    "Platform spend of runs whose usage settled, in USD.",
    ["actor"],
    registry=PROCESS,
)


def observe_platform_call(kind: str, status: str) -> None:
    """Count one platform API call attempt (the adapter's ``CallObserver``: kind is start,
    lookup, status, abort or datasetPage; status "ok", "429", "503"…, "transport", "invalid")."""
    PLATFORM_CALLS.labels(kind=kind, status=status).inc()


def observe_callback_attempt(delivered: bool, final: bool) -> None:
    """Count one signed POST to a callback URL by its outcome."""
    outcome = "delivered" if delivered else "failed" if final else "retry"
    CALLBACK_ATTEMPTS.labels(outcome=outcome).inc()


def observe_rows(actor: str, count: int) -> None:
    """Count a committed page of rows."""
    if count:
        ROWS_INGESTED.labels(actor=actor).inc(count)


def observe_completion_to_rows(seconds: float) -> None:
    """Record how long a finished run's rows took to be stored (negative clock skew: 0)."""
    COMPLETION_TO_ROWS.observe(max(seconds, 0.0))


def observe_spend(actor: str, usd: float | None) -> None:
    """Add a settled run's cost (unknown or zero: nothing)."""
    if usd:
        SPEND_USD.labels(actor=actor).inc(usd)
