"""Activities of capacity admission: ask for slots (signal-with-start of the admission
workflow), mark waiting children ``queued``, and refresh the account's limits with the leak
guard.

``request_slots`` is the one door into the admission workflow: it reads each child's
workspace and memory from the database and signal-with-starts the workflow, so the workflow
exists whenever a slot is asked for and one activity serves a whole batch of children.
"""

from __future__ import annotations

from sqlalchemy import Connection
from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError

from orchestrator.activities.deps import ActivityDeps
from orchestrator.db.queries import admission as queries
from orchestrator.domain.admission import Capacity, Slot, Ticket, capacity_for_us
from orchestrator.domain.ids import admission_workflow_id
from orchestrator.domain.lifecycle import ChildState
from orchestrator.platform.port import PlatformError
from orchestrator.workflows.admission_types import (
    ADMISSION_WORKFLOW,
    REQUEST_SLOTS_SIGNAL,
    AdmissionInput,
    MarkQueuedInput,
    MarkQueuedResult,
    RefreshInput,
    RefreshResult,
    RequestSlotsInput,
    RequestSlotsResult,
    SlotRequest,
)
from orchestrator.workflows.policies import ERR_RETRYABLE

Facts = list[queries.ChildFacts]


class AdmissionActivities:
    def __init__(self, deps: ActivityDeps, client: Client) -> None:
        self._deps = deps
        self._client = client

    def _memory(self, memory_mb: int | None) -> int:
        return memory_mb or self._deps.config.admission_default_memory_mb

    @activity.defn(name="request_slots")
    async def request_slots(self, params: RequestSlotsInput) -> RequestSlotsResult:
        """Ask the admission workflow of this task queue for a slot per child (idempotent:
        a ticket asked for twice is queued once)."""
        facts = await self._deps.read(queries.children_facts, params.child_ids)
        order = {cid: i for i, cid in enumerate(params.child_ids)}
        facts.sort(key=lambda f: order[f.child_id])  # FIFO: the master's order
        known = {f.child_id for f in facts}
        ready = [f.child_id for f in facts if f.state.terminal or f.has_platform_run] + [
            cid for cid in params.child_ids if cid not in known
        ]
        tickets = [
            Ticket(f.child_id, f.workspace_id, self._memory(f.memory_mb), params.master_id)
            for f in facts
            if f.child_id not in ready
        ]
        if not tickets:
            return RequestSlotsResult(requested=0, ready=ready)
        task_queue = activity.info().task_queue
        await self._client.start_workflow(
            ADMISSION_WORKFLOW,
            AdmissionInput(refresh_seconds=self._deps.config.account_limits_refresh_seconds),
            id=admission_workflow_id(task_queue),
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            start_signal=REQUEST_SLOTS_SIGNAL,
            start_signal_args=[SlotRequest(tickets=tickets)],
        )
        return RequestSlotsResult(requested=len(tickets), ready=ready)

    @activity.defn(name="mark_queued")
    async def mark_queued(self, params: MarkQueuedInput) -> MarkQueuedResult:
        """Children that were not granted at once: ``pending`` → ``queued`` (others stay)."""
        return MarkQueuedResult(await self._deps.tx(queries.mark_queued, params.child_ids))

    @activity.defn(name="refresh_admission")
    async def refresh_admission(self, params: RefreshInput) -> RefreshResult:
        """The account's limits (settings override the platform's maxima), the operators'
        workspace limits, and the leak guard's view of the database."""
        cfg = self._deps.config
        try:
            limits = await self._deps.platform.account_limits()
        except PlatformError as exc:
            raise ApplicationError(exc.message, type=ERR_RETRYABLE) from None
        held = set(params.held)

        def read(conn: Connection) -> tuple[Facts, Facts, dict[str, int]]:
            return (
                queries.children_facts(conn, params.held),
                queries.live_children(conn),
                queries.workspace_concurrency_limits(conn),
            )

        held_facts, live, workspace_limits = await self._deps.read(read)
        known = {f.child_id: f for f in held_facts}
        # Held no longer: gone, ended, or ingesting (its platform run is over; the poller
        # releases it then, this catches a release that was lost).
        stale = [
            cid
            for cid in params.held
            if cid not in known
            or known[cid].state.terminal
            or known[cid].state is ChildState.INGESTING
        ]
        adopted = {
            f.child_id: Slot(f.workspace_id, self._memory(f.memory_mb))
            for f in live
            if f.child_id not in held
        }
        # What the platform counts as ours: our children with a platform run that is live.
        on_platform = [f for f in live if f.has_platform_run]
        capacity = capacity_for_us(
            cfg.account_max_concurrent_runs
            if cfg.account_max_concurrent_runs is not None
            else limits.max_concurrent_runs,
            cfg.account_max_memory_mbytes
            if cfg.account_max_memory_mbytes is not None
            else limits.max_memory_mb,
            limits.active_runs,
            limits.active_memory_mb,
            len(on_platform),
            sum(self._memory(f.memory_mb) for f in on_platform),
        )
        return RefreshResult(
            capacity=Capacity(capacity.runs, capacity.memory_mb),
            workspace_limits=workspace_limits,
            stale=stale,
            adopted=adopted,
            refresh_seconds=cfg.account_limits_refresh_seconds,
            refusal_refresh_seconds=min(
                cfg.capacity_retry_seconds, cfg.account_limits_refresh_seconds
            ),
        )
