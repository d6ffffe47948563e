"""Inputs and results of workflows, activities and signals.

They stay small (ids, statuses, counts, offsets) because Temporal payloads and histories
are bounded; rows never travel through Temporal. New fields always get defaults so that
running workflows keep replaying.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.domain.follow import FollowPlan
from orchestrator.domain.lifecycle import ChildState


@dataclass(frozen=True)
class OrchestratorInput:
    run_id: str
    child_ids: list[str]
    # Chained runs: child id -> the child ids whose rows its input is built from. Those are
    # started only once all of these are terminal; every other child at once. Empty for
    # requests without chained runs (and in every history recorded before them).
    depends_on: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class OrchestratorResult:
    run_id: str
    state: str


@dataclass(frozen=True)
class StartChildInput:
    child_id: str
    #: The child holds an admission slot: a 402 is answered as "refused", not retried.
    admitted: bool = False
    #: The master's workflow id: once the run is known the activity starts the child's
    #: poller itself, reporting to that master (empty: the master starts it).
    poller_for: str = ""


@dataclass(frozen=True)
class StartChildResult:
    child_id: str
    started: bool
    platform_run_id: str | None
    dataset_id: str | None
    failure: str | None
    # The child's FollowPlan, flat as recorded in histories (every recorded payload has all
    # of them, so none needs a default).
    cap_seconds: float
    poll_interval_seconds: float
    poll_long_wait_seconds: int
    polls_per_workflow_run: int
    ingest_heartbeat_seconds: float
    #: An admitted start the platform refused for capacity (402): the error type, and the
    #: child is ``queued`` again. None otherwise.
    refused: str | None = None

    @classmethod
    def of(
        cls,
        child_id: str,
        *,
        started: bool,
        platform_run_id: str | None,
        dataset_id: str | None,
        failure: str | None,
        plan: FollowPlan,
        refused: str | None = None,
    ) -> StartChildResult:
        return cls(
            child_id=child_id,
            started=started,
            platform_run_id=platform_run_id,
            dataset_id=dataset_id,
            failure=failure,
            cap_seconds=plan.cap_seconds,
            poll_interval_seconds=plan.poll_interval_seconds,
            poll_long_wait_seconds=plan.poll_long_wait_seconds,
            polls_per_workflow_run=plan.polls_per_workflow_run,
            ingest_heartbeat_seconds=plan.ingest_heartbeat_seconds,
            refused=refused,
        )

    @property
    def plan(self) -> FollowPlan:
        return FollowPlan(
            cap_seconds=self.cap_seconds,
            poll_interval_seconds=self.poll_interval_seconds,
            poll_long_wait_seconds=self.poll_long_wait_seconds,
            polls_per_workflow_run=self.polls_per_workflow_run,
            ingest_heartbeat_seconds=self.ingest_heartbeat_seconds,
        )


@dataclass(frozen=True)
class PollerInput:
    run_id: str
    child_id: str
    platform_run_id: str
    dataset_id: str
    # The child's FollowPlan, flat as recorded in histories (see StartChildResult).
    cap_seconds: float
    poll_interval_seconds: float
    poll_long_wait_seconds: int
    polls_per_workflow_run: int
    # An ingest whose worker died is retried elsewhere after this long without a heartbeat.
    ingest_heartbeat_seconds: float
    # The master to tell when this child has finished (empty: nobody to tell).
    parent_workflow_id: str = ""
    # Carried across continue-as-new so the cap counts from the first run.
    deadline_epoch: float | None = None
    polls: int = 0

    @classmethod
    def following(
        cls,
        plan: FollowPlan,
        *,
        run_id: str,
        child_id: str,
        platform_run_id: str,
        dataset_id: str,
        parent_workflow_id: str,
    ) -> PollerInput:
        """The first input of the poller of a child: the start path and the reconciler
        both build it here, from the same plan."""
        return cls(
            run_id=run_id,
            child_id=child_id,
            platform_run_id=platform_run_id,
            dataset_id=dataset_id,
            cap_seconds=plan.cap_seconds,
            poll_interval_seconds=plan.poll_interval_seconds,
            poll_long_wait_seconds=plan.poll_long_wait_seconds,
            polls_per_workflow_run=plan.polls_per_workflow_run,
            ingest_heartbeat_seconds=plan.ingest_heartbeat_seconds,
            parent_workflow_id=parent_workflow_id,
        )


@dataclass(frozen=True)
class PollerResult:
    child_id: str
    state: str
    items: int = 0


#: The signal by which a poller (or ``finish_child`` for it) tells the master a child ended.
CHILD_FINISHED_SIGNAL = "child_finished"


@dataclass(frozen=True)
class ChildFinished:
    child_id: str
    state: str


@dataclass(frozen=True)
class StepInputInput:
    child_id: str


@dataclass(frozen=True)
class StepInputResult:
    """A chained child's input: built (the number of values per field), or skipped."""

    child_id: str
    state: str
    built: dict[str, int] = field(default_factory=dict)
    skipped: bool = False


@dataclass(frozen=True)
class StopRequest:
    """Sent to a master by a poller that found the request stopped (``stop_reason``)."""

    reason: str


@dataclass(frozen=True)
class PollInput:
    child_id: str
    platform_run_id: str
    wait_secs: int = 0
    reason: str = "poll"
    # Set by pollers that ingest the rows of runs that did not succeed (older ones do not).
    keep_partial: bool = False


@dataclass(frozen=True)
class PollResult:
    status: str
    terminal: bool
    succeeded: bool = False
    status_message: str | None = None
    child_state: str | None = None
    # The run did not succeed but its rows are kept: the child is ``ingesting`` and ends in
    # this state once its dataset is ingested.
    partial_state: str | None = None
    # The request was stopped (its budget or its workspace's is spent): its master must stop
    # every live child. Set on every poll from then on, so a restarted master learns it too.
    stop_reason: str | None = None


@dataclass(frozen=True)
class SettleUsageInput:
    child_id: str


@dataclass(frozen=True)
class SettleUsageResult:
    child_id: str
    usage_total_usd: float | None
    # The figure is final (recorded as settled); False when there was nothing to settle.
    settled: bool
    # Reads made by this call (0: settled already, or no platform run).
    reads: int = 0


@dataclass(frozen=True)
class IngestInput:
    child_id: str
    dataset_id: str
    # The state recorded once every row is stored: succeeded unless the run did not succeed
    # (partial rows), then failed / timed_out / aborted with this status message.
    final_state: str | None = None
    final_message: str | None = None


@dataclass(frozen=True)
class IngestResult:
    child_id: str
    items: int
    pages: int = 0


@dataclass(frozen=True)
class TimeOutChildInput:
    child_id: str
    message: str


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
class StopChildInput:
    """Stop a child (caller abort, cap reached): abort its platform run, then end it in
    ``state``, or keep its rows first (``keep_partial`` and the request's flag)."""

    child_id: str
    state: str
    message: str
    keep_partial: bool = True


@dataclass(frozen=True)
class StopChildResult:
    child_id: str
    # ``ingesting``: its rows are to be ingested (dataset_id), then ``final_state`` recorded
    # with ``final_message``.
    state: str
    ingest_heartbeat_seconds: float
    final_state: str | None = None
    final_message: str | None = None
    dataset_id: str | None = None

    @property
    def ingest(self) -> IngestInput | None:
        """The ingest still to run before this child is final, if any."""
        if self.state != ChildState.INGESTING or self.dataset_id is None:
            return None
        return IngestInput(
            child_id=self.child_id,
            dataset_id=self.dataset_id,
            final_state=self.final_state,
            final_message=self.final_message,
        )


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

    # Unknown fields of older payloads (``extra``, never read) are ignored on decoding.
    event_type: str = ""
    dispatch_id: str = ""


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


@dataclass(frozen=True)
class PushRowsInput:
    """Push the next batch of a final child's rows to its request's callback URL; where the
    next batch starts is the child's cursor in the database, never a payload."""

    child_id: str


@dataclass(frozen=True)
class PushRowsResult:
    child_id: str
    #: Nothing is left to send: every batch was acknowledged, the push was given up, or the
    #: request does not push rows.
    done: bool
    #: The batch this call sent (0: none was sent).
    seq: int = 0
    rows: int = 0
    batches_pushed: int = 0
    rows_pushed: int = 0


@dataclass(frozen=True)
class FinishChildInput:
    """A child whose platform run is over: what ``finish_child`` needs to end it."""

    child_id: str
    dataset_id: str
    # False for a run that did not succeed and whose rows are not kept (already ended).
    ingest: bool = True
    # None for a run that succeeded; else the state the child ends in once its rows are in
    # (failed / timed_out / aborted), with the platform's status message.
    final_state: str | None = None
    final_message: str | None = None
    # The master to tell when the child has ended (empty: nobody to tell).
    parent_workflow_id: str = ""

    @classmethod
    def after(
        cls, final: PollResult, *, child_id: str, dataset_id: str, parent_workflow_id: str
    ) -> FinishChildInput:
        """How to end a child whose run the look ``final`` found over: rows ingested if it
        succeeded or keeps them, ending in the run's state with its message."""
        partial = final.partial_state
        return cls(
            child_id=child_id,
            dataset_id=dataset_id,
            ingest=final.succeeded or partial is not None,
            final_state=partial,
            final_message=(final.status_message or None) if partial else None,
            parent_workflow_id=parent_workflow_id,
        )


@dataclass(frozen=True)
class FinishChildResult:
    child_id: str
    state: str
    items: int
    # The usage was settled here; False: the poller settles it by its own activity.
    usage_settled: bool
    # The request pushes rows to its callback: the poller does that, then tells the master.
    push_rows: bool
    # The master was told here (no rows to push, usage settled): the poller is done.
    told_master: bool


@dataclass(frozen=True)
class LookInput:
    """A look at a child's run that, if the run is over, ends the child too."""

    poll: PollInput
    dataset_id: str
    parent_workflow_id: str = ""


@dataclass(frozen=True)
class LookResult:
    poll: PollResult
    # How the child was ended, when the look found the run over; None otherwise.
    finished: FinishChildResult | None = None
    # Ending it failed for good (a permanent error of its ingest): why. The poller then
    # ends the child in its run's state with this in its message.
    failure: str | None = None
