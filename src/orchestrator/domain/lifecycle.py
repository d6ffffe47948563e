"""Lifecycle of a request (header) and of each child actor run, and the roll-up rule.

The header state is never set by hand: it is always recomputed from the children's states
with :func:`roll_up`, so every process that shows a state shows the same one.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class RunState(StrEnum):
    """State of a request (the header)."""

    QUEUED = "queued"
    SPAWNING = "spawning"
    RUNNING = "running"
    PARTIAL = "partial"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    ABORTED = "aborted"


class ChildState(StrEnum):
    """State of one child actor run."""

    PENDING = "pending"
    #: Waiting for a platform slot (capacity admission): never a failure.
    QUEUED = "queued"
    SPAWNING = "spawning"
    RUNNING = "running"
    INGESTING = "ingesting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    ABORTED = "aborted"
    #: A chained run whose input came out empty (its source gave no values): never started.
    SKIPPED = "skipped"

    @property
    def terminal(self) -> bool:
        return self in CHILD_TERMINAL

    @property
    def platform_run_seen_over(self) -> bool:
        """The orchestrator already knows the child's platform run is over (or it never
        had one): news of its end, a webhook, changes nothing."""
        return self is ChildState.INGESTING or self.terminal


CHILD_TERMINAL = frozenset(
    {
        ChildState.SUCCEEDED,
        ChildState.FAILED,
        ChildState.TIMED_OUT,
        ChildState.ABORTED,
        ChildState.SKIPPED,
    }
)

# Children never move backwards; a late or repeated update of an earlier state is ignored.
_CHILD_ORDER = {
    ChildState.PENDING: 0,
    ChildState.QUEUED: 1,
    ChildState.SPAWNING: 2,
    ChildState.RUNNING: 3,
    ChildState.INGESTING: 4,
}
#: Not started on the platform yet (waiting to be asked for, or for a slot).
CHILD_NOT_STARTED = frozenset({ChildState.PENDING, ChildState.QUEUED})


def child_transition_allowed(current: ChildState, new: ChildState) -> bool:
    """Whether a child may move from ``current`` to ``new``.

    Terminal states are final; other states only move forward, so a retried activity or a
    replayed workflow that reports an older state again cannot rewind a child.
    """
    if current.terminal:
        return False
    if new.terminal:
        return True
    return _CHILD_ORDER[new] > _CHILD_ORDER[current]


class PlatformStatus(StrEnum):
    """Apify run statuses, in Apify's own (hyphenated) spelling."""

    READY = "READY"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMING_OUT = "TIMING-OUT"
    TIMED_OUT = "TIMED-OUT"
    ABORTING = "ABORTING"
    ABORTED = "ABORTED"


PLATFORM_TERMINAL = frozenset(
    {
        PlatformStatus.SUCCEEDED,
        PlatformStatus.FAILED,
        PlatformStatus.TIMED_OUT,
        PlatformStatus.ABORTED,
    }
)


def is_platform_terminal(status: str) -> bool:
    """Whether a platform status is final. Unknown (future) statuses are treated as transient."""
    return status in PLATFORM_TERMINAL


def is_partial(state: ChildState, items_ingested: int) -> bool:
    """A child that kept rows without succeeding (a failed, timed-out or aborted run whose
    dataset was ingested all the same)."""
    return state is not ChildState.SUCCEEDED and items_ingested > 0


def child_state_for_platform_terminal(status: str) -> ChildState:
    """The child state that a terminal platform status leads to (before ingestion)."""
    if status == PlatformStatus.SUCCEEDED:
        return ChildState.INGESTING
    if status == PlatformStatus.ABORTED:
        return ChildState.ABORTED
    return ChildState.FAILED


def roll_up(children: Iterable[ChildState], *, aborted: bool = False, waiting: int = 0) -> RunState:
    """The header state that a set of child states adds up to (DESIGN.md's lifecycle table).

    - all pending or waiting for a slot (``queued``): queued; any child still being
      spawned (or queued while others run): spawning;
    - while some children are live: partial if any has failed or timed out, else running;
    - when all are terminal: succeeded / failed / timed_out when uniform, timed_out when
      none succeeded but one hit the backstop, partial for a mix with successes;
    - ``aborted`` (the caller aborted the request) wins once every child is terminal.

    Chained runs: ``waiting`` of the pending children wait for earlier runs' rows; they keep
    the request live but do not make it ``spawning`` (it is ``running`` while its sources
    run). A ``skipped`` child (its input came out empty) is neither a success nor a failure:
    the final state is that of the other children, so a request whose runs succeeded or
    were skipped is ``succeeded``, and one whose source failed (and so skipped its
    dependent) is ``failed``.
    """
    states = list(children)
    if not states:
        return RunState.QUEUED
    terminal = [s for s in states if s.terminal]
    live = [s for s in states if not s.terminal]
    unhappy = any(s in (ChildState.FAILED, ChildState.TIMED_OUT) for s in terminal)
    if live:
        if all(s in CHILD_NOT_STARTED for s in states):
            return RunState.QUEUED
        if unhappy:
            return RunState.PARTIAL
        if aborted:
            return RunState.RUNNING
        starting = sum(
            1 for s in live if s in (ChildState.PENDING, ChildState.QUEUED, ChildState.SPAWNING)
        )
        if starting > waiting:
            return RunState.SPAWNING
        return RunState.RUNNING
    if aborted:
        return RunState.ABORTED
    outcomes = [s for s in states if s is not ChildState.SKIPPED]
    if not outcomes:
        return RunState.SUCCEEDED
    succeeded = sum(1 for s in outcomes if s is ChildState.SUCCEEDED)
    if succeeded == len(outcomes):
        return RunState.SUCCEEDED
    if succeeded:
        return RunState.PARTIAL
    if any(s is ChildState.TIMED_OUT for s in outcomes):
        return RunState.TIMED_OUT
    if all(s is ChildState.ABORTED for s in outcomes):
        return RunState.ABORTED
    return RunState.FAILED


def run_is_terminal(children: Iterable[ChildState]) -> bool:
    """A header is terminal when every child is terminal."""
    return all(s.terminal for s in children)
