"""How a started child is followed: its *follow plan*, computed in one place.

Both the start path (``start_actor_run``) and the reconciler (restarting a lost poller)
follow a child by the same rules, so they both call :func:`follow_plan`. The knobs come from
``config.settings.Settings`` (the one source of their defaults) as a :class:`FollowSettings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FollowSettings:
    """The process-wide knobs (``Settings.follow_settings()``); no defaults on purpose."""

    poll_interval_seconds: float
    poll_long_wait_seconds: int
    polls_per_workflow_run: int
    ingest_heartbeat_seconds: float
    # The cap of a child that asked for ``timeoutSec`` is timeoutSec + this grace.
    timeout_grace_seconds: float
    # The cap of a child that gave no ``timeoutSec``.
    default_cap_seconds: float


@dataclass(frozen=True)
class FollowPlan:
    """What one poller does: how long it watches, how often it looks, how it ingests."""

    cap_seconds: float
    poll_interval_seconds: float
    poll_long_wait_seconds: int
    polls_per_workflow_run: int
    ingest_heartbeat_seconds: float


def backstop_cap_seconds(options: Mapping[str, Any], settings: FollowSettings) -> float:
    """The run's own timeout plus a grace period, or the default cap without one."""
    timeout = options.get("timeoutSec")
    if timeout:
        return float(timeout) + settings.timeout_grace_seconds
    return settings.default_cap_seconds


def follow_plan(options: Mapping[str, Any], settings: FollowSettings) -> FollowPlan:
    """The plan of a child with these run ``options`` (its stored ``timeoutSec`` etc.)."""
    return FollowPlan(
        cap_seconds=backstop_cap_seconds(options, settings),
        poll_interval_seconds=settings.poll_interval_seconds,
        poll_long_wait_seconds=settings.poll_long_wait_seconds,
        polls_per_workflow_run=settings.polls_per_workflow_run,
        ingest_heartbeat_seconds=settings.ingest_heartbeat_seconds,
    )
