"""Named retry policies and timeouts of every activity call.

Activities retry forever by default in Temporal; each call here bounds its attempts or its
total time deliberately.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

# Error types raised by activities (ApplicationError.type), matched by workflows.
ERR_PERMANENT = "PlatformPermanentError"
ERR_CAPACITY = "PlatformCapacityError"

DB_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=20,
)
DB_TIMEOUT = timedelta(seconds=60)

# Starting a run: transient errors back off up to a minute; capacity errors set their own
# (longer) delay through next_retry_delay. Bounded by the schedule-to-close time.
START_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    non_retryable_error_types=[ERR_PERMANENT],
)
START_TIMEOUT = timedelta(seconds=120)
START_SCHEDULE_TO_CLOSE = timedelta(hours=6)

POLL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=10,
    non_retryable_error_types=[ERR_PERMANENT],
)
POLL_TIMEOUT = timedelta(seconds=120)

INGEST_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=30,
    non_retryable_error_types=[ERR_PERMANENT],
)
INGEST_TIMEOUT = timedelta(hours=2)
INGEST_HEARTBEAT = timedelta(seconds=30)

ABORT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=10,
    non_retryable_error_types=[ERR_PERMANENT],
)
ABORT_TIMEOUT = timedelta(seconds=60)

# Delay before retrying a start the platform refused for lack of capacity.
CAPACITY_RETRY_DELAY = timedelta(seconds=30)
