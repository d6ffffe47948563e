"""Inputs, results and signals of the admission workflow and its activities.

Kept apart from ``workflows.types`` (the request's own workflows) so the admission component
reads as one unit; the same rules hold: small payloads (ids, counts), new fields get
defaults so running workflows keep replaying.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.domain.admission import AdmissionState, Capacity, Slot, Ticket

ADMISSION_WORKFLOW = "AdmissionWorkflow"
# Signals to the admission workflow.
REQUEST_SLOTS_SIGNAL = "request_slots"
RELEASE_SLOTS_SIGNAL = "release_slots"
START_REFUSED_SIGNAL = "start_refused"
REFRESH_SIGNAL = "refresh_limits"
# Queries of the admission workflow.
QUEUE_POSITIONS_QUERY = "queue_positions"
SNAPSHOT_QUERY = "snapshot"
# Signal to a master: its children may start.
SLOTS_GRANTED_SIGNAL = "slots_granted"


@dataclass(frozen=True)
class AdmissionInput:
    #: The carried state after a continue-as-new; None for a fresh workflow.
    state: AdmissionState | None = None
    refresh_seconds: float = 60.0
    #: Loop rounds (each a grant pass) before continuing-as-new even if Temporal has not
    #: suggested it yet, so the history stays small; tests set it low.
    rounds_per_run: int = 5000


@dataclass(frozen=True)
class SlotRequest:
    """Signal ``request_slots``: these children want to start."""

    tickets: list[Ticket]


@dataclass(frozen=True)
class SlotRelease:
    """Signal ``release_slots``: these children are done (or will never start)."""

    child_ids: list[str]


@dataclass(frozen=True)
class SlotRefusal:
    """Signal ``start_refused``: a granted start got a 402 from the platform anyway."""

    child_id: str
    error_type: str | None = None


@dataclass(frozen=True)
class SlotsGranted:
    """Signal ``slots_granted`` to a master: these children may start now."""

    child_ids: list[str]


@dataclass(frozen=True)
class RequestSlotsInput:
    run_id: str
    child_ids: list[str]
    master_id: str


@dataclass(frozen=True)
class RequestSlotsResult:
    requested: int
    #: Children that need no slot to go on: terminal, or started already (their start
    #: activity just reports them; the leak guard counts a live one as held).
    ready: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class MarkQueuedInput:
    child_ids: list[str]


@dataclass(frozen=True)
class MarkQueuedResult:
    marked: int


@dataclass(frozen=True)
class RefreshInput:
    #: The children holding a slot now (for the leak guard).
    held: list[str]


@dataclass(frozen=True)
class RefreshResult:
    capacity: Capacity
    workspace_limits: dict[str, int]
    #: Held children that are terminal, or unknown, in the database: released at once.
    stale: list[str]
    #: Live children in the database the workflow does not hold: counted as held.
    adopted: dict[str, Slot] = field(default_factory=dict)
    refresh_seconds: float = 60.0
    #: After a refused start the next refresh comes this soon (a read of the limits, never
    #: a start): capacity shrunk by a 402 is back within it once the platform has room.
    refusal_refresh_seconds: float = 30.0
