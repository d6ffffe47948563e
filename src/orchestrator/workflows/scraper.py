"""``ScraperOrchestrator``: the master workflow of one request.

It spawns every child in parallel (activity ``start_actor_run``), starts one
``PollerWorkflow`` per started child, waits until every child has finished, and finalises
the request. Chained children (``OrchestratorInput.depends_on``) make the request a DAG: such
a child waits until every child it takes rows from has finished (so its rows are ingested),
then the activity ``build_step_input`` completes its input from those rows in the database
(the workflow only sees counts) or skips it when the input came out empty, and it is started
like any other. A child whose start fails for good is recorded as failed without blocking its
siblings. A poller that finds the request's budget (or its workspace's) spent sends
``stop_request``, and the master stops every live child by the same cascade as an abort.

Pollers are started with ``ParentClosePolicy.ABANDON`` and report back by the
``child_finished`` signal instead of being awaited: a poller then outlives a master that was
terminated or restarted (by the reconciler), and a new master run simply learns of it
again. A child already terminal in the database counts as finished at once.

Capacity admission (``ADMIT_PATCH``; histories from before it replay the old path): a child
is started only once the admission workflow (workflows/admission.py) has granted it a slot.
The master asks for the slots of every child that can start now in one ``request_slots``
activity (a chained child: once its input is built), waits for ``slots_granted``, and
releases each slot (``release_slots``, batched) when its child has finished, failed to
start, been skipped, or, on abort or stop, for every child at once. A start the platform
refuses for capacity anyway is reported (``start_refused``) and waits for its next grant.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from orchestrator.domain.ids import admission_workflow_id, poller_workflow_id
    from orchestrator.domain.lifecycle import ChildState
    from orchestrator.workflows import calls
    from orchestrator.workflows.admission_types import (
        RELEASE_SLOTS_SIGNAL,
        SLOTS_GRANTED_SIGNAL,
        START_REFUSED_SIGNAL,
        SlotRefusal,
        SlotRelease,
        SlotsGranted,
    )
    from orchestrator.workflows.poller import (
        PARTIAL_ROWS_PATCH,
        STOP_REQUEST_SIGNAL,
        PollerWorkflow,
        ingest_partial_rows,
    )
    from orchestrator.workflows.row_delivery import ROW_PUSH_PATCH, push_child_rows
    from orchestrator.workflows.types import (
        CHILD_FINISHED_SIGNAL,
        ChildFinished,
        OrchestratorInput,
        OrchestratorResult,
        PollerInput,
        StartChildResult,
        StopRequest,
    )

ORCHESTRATOR_WORKFLOW = "ScraperOrchestrator"
# From here on a start cancelled by an abort (say, while waiting for capacity) is left to
# the abort sweep, which records the child ``aborted``; before, it was recorded as failed.
CANCELLED_START_PATCH = "cancelled-start-is-aborted"
# Children wait for a slot of the admission workflow before they are started.
ADMIT_PATCH = "admit-children"
# From here on the start activity starts each child's poller (with the run just known), so
# the master's history holds one activity per child and no child-workflow start: every
# event of every child of a request goes through this one workflow, one at a time.
POLLER_BY_START_PATCH = "poller-started-by-start"
# Children still waiting for a slot are asked for again this often: if the admission
# workflow was reset (terminated, started afresh) their tickets are back within this time.
ADMISSION_REASK = timedelta(minutes=5)


@workflow.defn(name=ORCHESTRATOR_WORKFLOW)
class ScraperOrchestrator:
    def __init__(self) -> None:
        self._finished: dict[str, str] = {}
        self._pollers: set[str] = set()
        self._stop_reason: str | None = None
        self._spawning: asyncio.Future[list[None]] | None = None
        # Admission: children granted a slot and not started yet, and those released.
        self._admit = False
        self._poller_by_start = False
        self._granted: set[str] = set()
        self._released: set[str] = set()
        self._closing = False
        self._awaiting_grant: set[str] = set()

    @workflow.signal(name=CHILD_FINISHED_SIGNAL)
    def child_finished(self, done: ChildFinished) -> None:
        self._finished[done.child_id] = done.state

    @workflow.signal(name=SLOTS_GRANTED_SIGNAL)
    def slots_granted(self, granted: SlotsGranted) -> None:
        self._granted.update(granted.child_ids)

    @workflow.signal(name=STOP_REQUEST_SIGNAL)
    def stop_request(self, stop: StopRequest) -> None:
        """A poller found the request stopped (a budget is spent): stop every live child,
        as an abort does. Starts still in flight are cancelled first."""
        if self._stop_reason is None:
            self._stop_reason = stop.reason
            if self._spawning is not None and not self._spawning.done():
                self._spawning.cancel()

    @workflow.run
    async def run(self, params: OrchestratorInput) -> OrchestratorResult:
        expected = set(params.child_ids)
        self._admit = workflow.patched(ADMIT_PATCH)
        self._poller_by_start = self._admit and workflow.patched(POLLER_BY_START_PATCH)
        # Side tasks of admission: releasing finished children's slots, asking again.
        side: list[asyncio.Task[None]] = []
        try:
            if self._admit:
                side = [
                    asyncio.create_task(self._release_finished()),
                    asyncio.create_task(self._reask(params.run_id)),
                ]
                now = [cid for cid in params.child_ids if cid not in params.depends_on]
                if now and not await self._request_slots(params.run_id, now):
                    raise asyncio.CancelledError  # aborted while asking: the abort path
            self._spawning = asyncio.gather(
                *(
                    self._spawn_after(params.run_id, cid, params.depends_on[cid])
                    if cid in params.depends_on
                    else self._spawn(params.run_id, cid)
                    for cid in params.child_ids
                )
            )
            await self._spawning
            await workflow.wait_condition(
                lambda: expected <= self._finished.keys() or self._stop_reason is not None
            )
            if not expected <= self._finished.keys():
                await self._abort(params)
        except asyncio.CancelledError:
            # The caller aborted (the workflow is cancelled) or a stop cancelled the starts.
            await self._abort(params)
        if self._admit:
            self._closing = True
            await asyncio.gather(*side)
            # Every slot and waiting ticket of this request goes (unknown ids are ignored).
            await self._release([c for c in params.child_ids if c not in self._released])
        final = await calls.finalize_run(params.run_id)
        if final.deliver_callback:
            await self._deliver_callback(params.run_id)
        return OrchestratorResult(run_id=params.run_id, state=final.state)

    async def _deliver_callback(self, run_id: str) -> None:
        """Tell the caller (signed callback), retried on CALLBACK_RETRY; a callback that
        cannot be delivered is recorded in the events and does not change the run's state."""
        try:
            await calls.deliver_callback(run_id)
        except ActivityError as err:
            workflow.logger.warning("callback of %s not delivered: %s", run_id, _cause(err))

    async def _spawn_after(self, run_id: str, child_id: str, sources: list[str]) -> None:
        """A chained child: once every source has finished, build its input from their rows
        (or skip it when that came out empty), then start it. A stop or an abort cancels the
        wait, and the sweep ends it ``aborted``: it is never started."""
        await workflow.wait_condition(lambda: all(s in self._finished for s in sources))
        try:
            step = await calls.build_step_input(child_id)
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                return
            await calls.record_child_outcome(
                child_id, ChildState.FAILED, f"could not build its input: {_cause(err)}"
            )
            self._finished[child_id] = ChildState.FAILED.value
            return
        if step.skipped or ChildState(step.state).terminal:
            self._finished.setdefault(child_id, step.state)
            return
        if self._admit and not await self._request_slots(run_id, [child_id]):
            return  # a stop or an abort came meanwhile; the sweep ends it aborted
        await self._spawn(run_id, child_id)

    async def _request_slots(self, run_id: str, child_ids: list[str]) -> bool:
        """Ask admission for these children's slots; False when cancelled meanwhile (an
        abort or a stop)."""
        try:
            asked = await calls.request_slots(run_id, child_ids, workflow.info().workflow_id)
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                return False
            raise
        self._granted.update(asked.ready)
        return True

    async def _signal_admission(self, signal: str, arg: SlotRelease | SlotRefusal) -> None:
        handle = workflow.get_external_workflow_handle(
            admission_workflow_id(workflow.info().task_queue)
        )
        try:
            await handle.signal(signal, arg)
        except Exception:  # no admission workflow (never asked): nothing is held
            workflow.logger.info("admission workflow not signalled (%s)", signal)

    async def _release(self, child_ids: list[str]) -> None:
        if child_ids:
            self._released.update(child_ids)
            await self._signal_admission(RELEASE_SLOTS_SIGNAL, SlotRelease(child_ids=child_ids))

    async def _release_finished(self) -> None:
        """Release the slots of finished children as they finish, batched."""
        while True:
            await workflow.wait_condition(
                lambda: self._closing or bool(self._finished.keys() - self._released)
            )
            if self._closing:
                return
            await self._release(sorted(self._finished.keys() - self._released))

    async def _reask(self, run_id: str) -> None:
        """Ask again, now and then, for the slots still awaited (idempotent for admission)."""
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(lambda: self._closing, timeout=ADMISSION_REASK)
            waiting = sorted(self._awaiting_grant - self._granted)
            if waiting and not self._closing:
                try:
                    await self._request_slots(run_id, waiting)
                except ActivityError as err:  # the next round asks again
                    workflow.logger.warning("slots not asked for again: %s", _cause(err))

    async def _start_admitted(self, child_id: str) -> StartChildResult:
        """Wait for a slot, then start; a start the platform refused for capacity gives the
        slot back (the admission workflow requeues it at its workspace's head) and waits for
        the next grant."""
        while True:
            self._awaiting_grant.add(child_id)
            try:
                await workflow.wait_condition(lambda: child_id in self._granted)
            finally:
                self._awaiting_grant.discard(child_id)
            started = await calls.start_actor_run(
                child_id,
                admitted=True,
                poller_for=workflow.info().workflow_id if self._poller_by_start else "",
            )
            if started.refused is None:
                return started
            self._granted.discard(child_id)
            await self._signal_admission(
                START_REFUSED_SIGNAL, SlotRefusal(child_id=child_id, error_type=started.refused)
            )

    async def _spawn(self, run_id: str, child_id: str) -> None:
        try:
            if self._admit:
                started = await self._start_admitted(child_id)
            else:
                started = await calls.start_actor_run(child_id)
        except ActivityError as err:
            if isinstance(err.cause, CancelledError) and workflow.patched(CANCELLED_START_PATCH):
                # Aborted before it started: not a failure; the abort sweep records it.
                return
            await calls.record_child_outcome(
                child_id, ChildState.FAILED, f"could not start the actor run: {_cause(err)}"
            )
            self._finished[child_id] = ChildState.FAILED.value
            return
        if not started.started or started.platform_run_id is None or started.dataset_id is None:
            # Already terminal (failed to start, or finished before a restart of this run).
            self._finished.setdefault(child_id, "terminal")
            return
        if self._poller_by_start:  # the start activity started its poller
            self._pollers.add(child_id)
            return
        # A poller from before a restart may still be following it; it will report here.
        with contextlib.suppress(WorkflowAlreadyStartedError):
            await workflow.start_child_workflow(
                PollerWorkflow.run,
                PollerInput.following(
                    started.plan,
                    run_id=run_id,
                    child_id=child_id,
                    platform_run_id=started.platform_run_id,
                    dataset_id=started.dataset_id,
                    parent_workflow_id=workflow.info().workflow_id,
                ),
                id=poller_workflow_id(child_id),
                parent_close_policy=ParentClosePolicy.ABANDON,
            )
        self._pollers.add(child_id)

    async def _abort(self, params: OrchestratorInput) -> None:
        """The caller aborted, or a budget is spent: cancel the pollers (each aborts its
        platform run), and sweep every child, since one may be between its start and its
        poller. The children's messages say which (the activities read the request's stop
        reason)."""
        keep_partial = workflow.patched(PARTIAL_ROWS_PATCH)
        # A copy, in a fixed order: starts still in flight add pollers while this awaits, and
        # a set's order of strings differs between processes (a replay must cancel alike).
        for child_id in sorted(self._pollers):
            if child_id not in self._finished:
                handle = workflow.get_external_workflow_handle(poller_workflow_id(child_id))
                try:
                    await handle.cancel()
                except Exception:  # the poller may have just finished; the sweep covers it
                    workflow.logger.info("poller of %s could not be cancelled", child_id)
        if not keep_partial:
            await asyncio.gather(*(calls.abort_child(cid) for cid in params.child_ids))
            return
        await asyncio.gather(*(self._sweep(cid) for cid in params.child_ids))
        # Pollers still ingesting kept rows report when they are done.
        expected = set(params.child_ids)
        await workflow.wait_condition(lambda: expected <= self._finished.keys())

    async def _sweep(self, child_id: str) -> None:
        """Stop one child after an abort. Its rows, if kept, are ingested by its poller, or
        here when it has none (it was aborted between its start and its poller)."""
        message = "aborted by the caller"
        try:
            stopped = await calls.stop_child(child_id, ChildState.ABORTED, message)
        except ActivityError as err:
            await calls.record_child_outcome(
                child_id,
                ChildState.ABORTED,
                f"{message}; aborting the platform run failed: {_cause(err)}",
            )
            self._finished[child_id] = ChildState.ABORTED.value
            return
        ingest = stopped.ingest
        if ingest is None:
            self._finished.setdefault(child_id, stopped.state)
        elif child_id not in self._pollers:
            done = await ingest_partial_rows(ingest, stopped.ingest_heartbeat_seconds)
            if workflow.patched(ROW_PUSH_PATCH):  # no poller to push its rows: push them here
                await push_child_rows(child_id)
            self._finished[child_id] = done.state


def _cause(err: BaseException) -> str:
    """The innermost failure message of an activity error."""
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err)
