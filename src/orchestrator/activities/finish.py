"""``finish_child``: everything a child needs once its platform run is over, in one activity.

A poller used to run one activity or signal per step here (give the admission slot back,
ingest the dataset, settle the usage, tell the master), each a few history events and a
workflow task: at hundreds of children in flight those dominated the Temporal server's
work (docs/BENCHMARKS.md, "Fan-out at scale"). This runs them in order, each step
idempotent, so a retry after any of them repeats only what is left:

1. release the child's admission slot (a signal; the account's slot is free now);
2. ingest the dataset (``IngestActivities.ingest_dataset``: resumable, exactly once), and
   with it record the child's final state;
3. settle the run's usage (``PlatformActivities.settle_usage``); a failure here is left to
   the poller's own ``settle_usage`` activity, which retries it;
4. tell the master the child has ended, unless the request pushes rows to its callback:
   then the poller pushes them first, so the summary callback comes after every batch.
"""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from orchestrator.activities.deps import ActivityDeps
from orchestrator.activities.ingest import IngestActivities
from orchestrator.activities.platform import PlatformActivities, heartbeats
from orchestrator.db.queries import runs as run_queries
from orchestrator.domain.ids import admission_workflow_id
from orchestrator.platform.port import PlatformError
from orchestrator.workflows.admission_types import RELEASE_SLOTS_SIGNAL, SlotRelease
from orchestrator.workflows.policies import ERR_PERMANENT
from orchestrator.workflows.types import (
    CHILD_FINISHED_SIGNAL,
    ChildFinished,
    FinishChildInput,
    FinishChildResult,
    IngestInput,
    LookInput,
    LookResult,
    SettleUsageInput,
)


class FinishActivities:
    def __init__(
        self,
        deps: ActivityDeps,
        ingest: IngestActivities,
        platform: PlatformActivities,
        client: Client,
    ) -> None:
        self._deps = deps
        self._ingest = ingest
        self._platform = platform
        self._client = client

    async def _signal(self, workflow_id: str, signal: str, arg: object) -> bool:
        """A signal that may find nobody (no admission workflow, a master gone): whether
        it was delivered."""
        try:
            await self._client.get_workflow_handle(workflow_id).signal(signal, arg)
        except Exception as exc:  # RPCError not found, mostly; nothing is held then
            activity.logger.info("signal %s to %s not delivered: %s", signal, workflow_id, exc)
            return False
        return True

    @activity.defn(name="finish_child")
    async def finish_child(self, params: FinishChildInput) -> FinishChildResult:
        task_queue = activity.info().task_queue
        # The slot goes back while the ingest runs: the signal never raises, and the first
        # page need not wait for its round trip to the Temporal server.
        release = asyncio.create_task(
            self._signal(
                admission_workflow_id(task_queue),
                RELEASE_SLOTS_SIGNAL,
                SlotRelease(child_ids=[params.child_id]),
            )
        )
        items = 0
        try:
            if params.ingest:
                ingested = await self._ingest.ingest_dataset(
                    IngestInput(
                        child_id=params.child_id,
                        dataset_id=params.dataset_id,
                        final_state=params.final_state,
                        final_message=params.final_message,
                    )
                )
                items = ingested.items
        finally:
            await release
        settled = await self._settle(params.child_id)
        found = await self._deps.read(run_queries.get_child_and_run, params.child_id)
        if found is None:
            raise ApplicationError(f"child {params.child_id} is not in the database")
        child, run = found
        push_rows = run.deliver_rows != "none"
        state = child.state.value
        told = False
        if settled and not push_rows:
            told = not params.parent_workflow_id or await self._signal(
                params.parent_workflow_id,
                CHILD_FINISHED_SIGNAL,
                ChildFinished(child_id=params.child_id, state=state),
            )
        return FinishChildResult(
            child_id=params.child_id,
            state=state,
            items=items,
            usage_settled=settled,
            push_rows=push_rows,
            told_master=told,
        )

    @activity.defn(name="look_and_finish")
    async def look_and_finish(self, params: LookInput) -> LookResult:
        """Read the run's status (``poll_platform_run``); if it is over, end the child as
        ``finish_child`` does, in the same activity. A retry reads the status again (one
        more ``child.poll`` event) and goes on where the ingest stopped."""
        async with heartbeats():
            poll = await self._platform.poll_platform_run(params.poll)
        if not poll.terminal:
            return LookResult(poll=poll)
        try:
            finished = await self.finish_child(
                FinishChildInput.after(
                    poll,
                    child_id=params.poll.child_id,
                    dataset_id=params.dataset_id,
                    parent_workflow_id=params.parent_workflow_id,
                )
            )
        except ApplicationError as exc:
            # A permanent failure is the child's, not the look's: reported, not retried
            # (a retry, or the poller's fallback, would only fail the same way again).
            if not (exc.non_retryable or exc.type == ERR_PERMANENT):
                raise
            return LookResult(poll=poll, failure=str(exc))
        return LookResult(poll=poll, finished=finished)

    async def _settle(self, child_id: str) -> bool:
        try:
            await self._platform.settle_usage(SettleUsageInput(child_id=child_id))
        except (ApplicationError, PlatformError) as exc:
            activity.logger.warning("usage of %s not settled here: %s", child_id, exc)
            return False
        return True
