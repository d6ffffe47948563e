"""``AdmissionWorkflow``: the account's capacity, admitted fairly across workspaces.

One long-lived workflow per task queue (``domain.ids.admission_workflow_id``) holds the
known capacity, the slots held and the waiting tickets (``domain.admission``, the pure
policy). Masters ask for slots through the ``request_slots`` activity (signal-with-start),
are told ``slots_granted`` (batched per master), and signal ``release_slots`` when children
end and ``start_refused`` when the platform said 402 anyway. A timer refreshes the account's
limits and runs the leak guard (``refresh_admission``). The state is workflow state, so it
survives worker restarts; it is carried through continue-as-new when Temporal suggests it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from orchestrator.domain import admission as policy
    from orchestrator.domain.admission import AdmissionState, Grant, Snapshot
    from orchestrator.workflows import calls
    from orchestrator.workflows.admission_types import (
        ADMISSION_WORKFLOW,
        QUEUE_POSITIONS_QUERY,
        REFRESH_SIGNAL,
        RELEASE_SLOTS_SIGNAL,
        REQUEST_SLOTS_SIGNAL,
        SLOTS_GRANTED_SIGNAL,
        SNAPSHOT_QUERY,
        START_REFUSED_SIGNAL,
        AdmissionInput,
        SlotRefusal,
        SlotRelease,
        SlotRequest,
        SlotsGranted,
    )

# A refresh that failed (the platform is unreachable) is tried again this soon.
REFRESH_RETRY_SECONDS = 5.0


@workflow.defn(name=ADMISSION_WORKFLOW)
class AdmissionWorkflow:
    @workflow.init
    def __init__(self, params: AdmissionInput) -> None:
        # Built here, from the input, so the start signal of a signal-with-start (handled
        # before ``run`` begins) already finds the carried state.
        self._state = params.state or AdmissionState()
        self._refresh_seconds = params.refresh_seconds
        self._regrants: list[Grant] = []
        self._changed = False
        self._refresh_wanted = False
        self._refusal_refresh_seconds = params.refresh_seconds
        self._refused = False

    @workflow.signal(name=REQUEST_SLOTS_SIGNAL)
    def request_slots(self, req: SlotRequest) -> None:
        self._regrants.extend(policy.enqueue(self._state, list(req.tickets)))
        self._changed = True

    @workflow.signal(name=RELEASE_SLOTS_SIGNAL)
    def release_slots(self, rel: SlotRelease) -> None:
        policy.release(self._state, list(rel.child_ids))
        self._changed = True

    @workflow.signal(name=START_REFUSED_SIGNAL)
    def start_refused(self, refusal: SlotRefusal) -> None:
        if policy.refuse(self._state, refusal.child_id, refusal.error_type):
            self._refused = True
        self._changed = True

    @workflow.signal(name=REFRESH_SIGNAL)
    def refresh_limits(self) -> None:
        self._refresh_wanted = True

    @workflow.query(name=SNAPSHOT_QUERY)
    def snapshot(self) -> Snapshot:
        return policy.snapshot(self._state)

    @workflow.query(name=QUEUE_POSITIONS_QUERY)
    def queue_positions(self, child_ids: list[str]) -> dict[str, int]:
        """Positions (1 = next) of those of ``child_ids`` that are waiting."""
        positions = policy.queue_positions(self._state)
        return {cid: positions[cid] for cid in child_ids if cid in positions}

    @workflow.run
    async def run(self, params: AdmissionInput) -> None:
        next_refresh = workflow.now()
        rounds = 0
        while True:
            if self._refresh_wanted or workflow.now() >= next_refresh:
                ok = await self._refresh()
                wait = self._refresh_seconds if ok else REFRESH_RETRY_SECONDS
                next_refresh = workflow.now() + timedelta(seconds=wait)
            if self._refused:  # read the limits again soon (not the full interval)
                self._refused = False
                soon = workflow.now() + timedelta(seconds=self._refusal_refresh_seconds)
                next_refresh = min(next_refresh, soon)
            self._changed = False
            grants, self._regrants = self._regrants + policy.grant(self._state), []
            if grants:
                await self._tell(grants)
            waiting = policy.unmarked(self._state)
            if waiting:
                await calls.mark_queued(waiting)
            if self._changed or self._regrants:
                continue
            rounds += 1
            if rounds >= params.rounds_per_run or workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(
                    dataclasses.replace(
                        params, state=self._state, refresh_seconds=self._refresh_seconds
                    )
                )
            left = (next_refresh - workflow.now()).total_seconds()
            with contextlib.suppress(TimeoutError):  # the refresh is due
                await workflow.wait_condition(
                    lambda: self._changed or self._refresh_wanted or bool(self._regrants),
                    timeout=max(left, 0.001),
                )

    async def _refresh(self) -> bool:
        """Read the limits and run the leak guard; False when it could not."""
        self._refresh_wanted = False
        try:
            fresh = await calls.refresh_admission(list(self._state.held))
        except ActivityError as err:
            workflow.logger.warning("account limits not refreshed: %s", err)
            return False
        policy.apply_refresh(
            self._state, fresh.capacity, fresh.workspace_limits, fresh.stale, fresh.adopted
        )
        self._refresh_seconds = fresh.refresh_seconds
        self._refusal_refresh_seconds = fresh.refusal_refresh_seconds
        return True

    async def _tell(self, grants: list[Grant]) -> None:
        """Signal each master its granted children (one signal per master). A master that
        cannot be signalled (it is gone) gets its slots back; it asks again if it returns."""
        by_master: dict[str, list[str]] = {}
        for g in grants:
            if g.master_id:
                by_master.setdefault(g.master_id, []).append(g.child_id)

        async def tell(master: str, ids: list[str]) -> None:
            try:
                await workflow.get_external_workflow_handle(master).signal(
                    SLOTS_GRANTED_SIGNAL, SlotsGranted(child_ids=ids)
                )
            except Exception:  # its master is gone: free the slots
                workflow.logger.info(
                    "master %s not reachable; releasing %d slot(s)", master, len(ids)
                )
                policy.release(self._state, ids)
                self._changed = True

        await asyncio.gather(*(tell(m, ids) for m, ids in by_master.items()))
