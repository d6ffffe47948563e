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
ERR_RETRYABLE = "PlatformRetryableError"
# An abort the platform has not confirmed yet (the run is still ABORTING): retried.
ERR_ABORT_NOT_CONFIRMED = "AbortNotConfirmed"
# A chained run's input was asked for before one of its sources ended (retried).
ERR_SOURCE_NOT_FINISHED = "StepSourceNotFinished"

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
# The start heartbeats while its platform call is in flight: an attempt lost with its worker
# is retried after this (the retry looks for the run the lost attempt may have started).
START_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
START_SCHEDULE_TO_CLOSE = timedelta(hours=6)

POLL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=10,
    non_retryable_error_types=[ERR_PERMANENT],
)
# Plus the long-poll wait of the call; short, so a poll lost with its worker is retried soon.
POLL_TIMEOUT = timedelta(seconds=30)

INGEST_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=30,
    non_retryable_error_types=[ERR_PERMANENT],
)
INGEST_TIMEOUT = timedelta(hours=2)

# stop_child (caller aborted, past the cap; abort_child and time_out_child before it):
# abort, then confirm.
ABORT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=10,
    non_retryable_error_types=[ERR_PERMANENT],
)
ABORT_TIMEOUT = timedelta(seconds=60)

# settle_usage: a few reads seconds apart after the run ended (bounded by the settings:
# at most 300 s wait + 20 reads of 60 s); it heartbeats while it waits between reads.
SETTLE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
    non_retryable_error_types=[ERR_PERMANENT],
)
SETTLE_TIMEOUT = timedelta(minutes=30)
SETTLE_HEARTBEAT_TIMEOUT = timedelta(seconds=30)

# One drift-repair pass; the schedule starts the next one anyway.
RECONCILE_RETRY = RetryPolicy(maximum_attempts=3)
RECONCILE_TIMEOUT = timedelta(minutes=5)


# Outbound callbacks: one HTTP attempt per activity attempt. The schedule mirrors
# delivery.sender.CALLBACK_RETRY_SCHEDULE (5 s doubling to 1 h, 33 attempts, ~23.4 h;
# tests/unit/test_auth_primitives.py checks they agree); the activity also sets
# next_retry_delay itself (Retry-After, a shorter schedule in tests). Permanent outcomes
# (4xx other than 408/429, unsafe URL) raise ERR_CALLBACK_PERMANENT and stop the retries.
ERR_CALLBACK_PERMANENT = "CallbackPermanentError"
CALLBACK_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=5),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(hours=1),
    maximum_attempts=33,
    non_retryable_error_types=[ERR_CALLBACK_PERMANENT],
)
CALLBACK_TIMEOUT = timedelta(seconds=60)

# Building a chained run's input: database reads only, a page of rows at a time.
STEP_INPUT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=20,
    non_retryable_error_types=[ERR_PERMANENT],
)
STEP_INPUT_TIMEOUT = timedelta(minutes=10)
STEP_INPUT_HEARTBEAT_TIMEOUT = timedelta(seconds=30)
# Rows pushed to the callback (activities/row_delivery.py): one HTTP attempt of one batch per
# activity attempt, on the callback's schedule; a batch refused for good (or out of
# attempts) raises ERR_ROWS_PERMANENT and ends that child's push.
ERR_ROWS_PERMANENT = "RowBatchPermanentError"
ROWS_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=5),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(hours=1),
    maximum_attempts=33,
    non_retryable_error_types=[ERR_ROWS_PERMANENT],
)
# Reading one batch (at most the byte cap plus one row) and one POST of 15 s at most.
ROWS_TIMEOUT = timedelta(minutes=2)

# Capacity admission: asking for slots (a signal-with-start) and refreshing the account's
# limits. A refresh that still fails leaves the known capacity as it was (the admission
# workflow tries again soon); asking for slots keeps trying, since a child waits on it.
ADMISSION_TIMEOUT = timedelta(seconds=30)
ADMISSION_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=50,
)
REFRESH_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=5),
    maximum_attempts=3,
)
