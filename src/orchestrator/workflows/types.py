"""Inputs and results of workflows, activities and signals.

They stay small (ids, statuses, counts, offsets) because Temporal payloads and histories
are bounded; rows never travel through Temporal. New fields always get defaults so that
running workflows keep replaying.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class OrchestratorInput:
    run_id: str
    child_ids: list[str]


@dataclass(frozen=True)
class OrchestratorResult:
    run_id: str
    state: str


@dataclass(frozen=True)
class StartChildInput:
    child_id: str


@dataclass(frozen=True)
class StartChildResult:
    child_id: str
    started: bool
    platform_run_id: str | None = None
    dataset_id: str | None = None
    cap_seconds: float = 4 * 3600.0
    poll_interval_seconds: float = 60.0
    failure: str | None = None
    poll_long_wait_seconds: int = 10
    polls_per_workflow_run: int = 500
    ingest_heartbeat_seconds: float = 30.0


@dataclass(frozen=True)
class PollerInput:
    run_id: str
    child_id: str
    platform_run_id: str
    dataset_id: str
    cap_seconds: float
    poll_interval_seconds: float
    poll_long_wait_seconds: int = 10
    polls_per_workflow_run: int = 500
    # An ingest whose worker died is retried elsewhere after this long without a heartbeat.
    ingest_heartbeat_seconds: float = 30.0
    # The master to tell when this child has finished (empty: nobody to tell).
    parent_workflow_id: str = ""
    # Carried across continue-as-new so the cap counts from the first run.
    deadline_epoch: float | None = None
    polls: int = 0


@dataclass(frozen=True)
class PollerResult:
    child_id: str
    state: str
    items: int = 0


@dataclass(frozen=True)
class ChildFinished:
    child_id: str
    state: str


@dataclass(frozen=True)
class PollInput:
    child_id: str
    platform_run_id: str
    wait_secs: int = 0
    reason: str = "poll"


@dataclass(frozen=True)
class PollResult:
    status: str
    terminal: bool
    succeeded: bool = False
    status_message: str | None = None
    child_state: str | None = None


@dataclass(frozen=True)
class IngestInput:
    child_id: str
    dataset_id: str


@dataclass(frozen=True)
class IngestResult:
    child_id: str
    items: int
    pages: int = 0


@dataclass(frozen=True)
class ChildOutcomeInput:
    child_id: str
    state: str
    message: str | None = None


@dataclass(frozen=True)
class AbortChildInput:
    child_id: str


@dataclass(frozen=True)
class AbortChildResult:
    child_id: str
    state: str


@dataclass(frozen=True)
class FinalizeInput:
    run_id: str


@dataclass(frozen=True)
class FinalizeResult:
    run_id: str
    state: str
    terminal: bool
    deliver_callback: bool = False


@dataclass(frozen=True)
class PlatformSignal:
    """Sent by the webhook receiver: 'something happened, look again'. Never trusted."""

    event_type: str = ""
    dispatch_id: str = ""
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ReconcileResult:
    checked: int = 0
    masters_restarted: int = 0
    pollers_restarted: int = 0


@dataclass(frozen=True)
class DeliverCallbackInput:
    run_id: str


@dataclass(frozen=True)
class DeliverCallbackResult:
    run_id: str
    delivered: bool
    attempts: int = 1
    status_code: int | None = None
