"""Activities that only touch the database: record an outcome, finalise a request."""

from __future__ import annotations

from sqlalchemy import Connection
from temporalio import activity

from orchestrator.activities.deps import ActivityDeps
from orchestrator.db.queries import runs as run_queries
from orchestrator.domain.lifecycle import ChildState
from orchestrator.workflows.types import ChildOutcomeInput, FinalizeInput, FinalizeResult


class RecordActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self._deps = deps

    @activity.defn(name="record_child_outcome")
    async def record_child_outcome(self, params: ChildOutcomeInput) -> None:
        await self._deps.tx(
            run_queries.transition_child,
            params.child_id,
            ChildState(params.state),
            status_message=params.message,
        )

    @activity.defn(name="finalize_run")
    async def finalize_run(self, params: FinalizeInput) -> FinalizeResult:
        def finalize(conn: Connection) -> FinalizeResult:
            state = run_queries.recompute_run(conn, params.run_id)
            run = run_queries.get_run(conn, params.run_id)
            assert run is not None
            return FinalizeResult(
                run_id=run.id,
                state=state.value,
                terminal=run.terminal,
                deliver_callback=bool(run.callback_url) and run.terminal,
            )

        return await self._deps.tx(finalize)
