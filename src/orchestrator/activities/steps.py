"""Chained runs: build a dependent run's input from its sources' rows in the database.

The master workflow runs this once every run a chained child depends on is terminal (and
so ingested). The rows are read here, page by page, from the app database - never through
Temporal, whose payloads and histories stay small: the workflow gets back counts only. The
completed input is written into the child's ``input_json``, so the start path
(``start_actor_run``) and everything after it are the same as for any other run. An input
field that comes out empty skips the child (``skipped``, with the reason) instead of
starting an actor that has nothing to work on.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from orchestrator.activities.deps import ActivityDeps
from orchestrator.db.queries import registry
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.queries import steps as step_queries
from orchestrator.domain.chaining import StepSource, ValueCollector, skip_message
from orchestrator.domain.ids import child_id as child_id_of
from orchestrator.domain.input_schema import input_error
from orchestrator.domain.lifecycle import ChildState
from orchestrator.workflows.policies import ERR_PERMANENT, ERR_SOURCE_NOT_FINISHED
from orchestrator.workflows.types import StepInputInput, StepInputResult


def _result(child: run_queries.ChildRecord) -> StepInputResult:
    return StepInputResult(
        child_id=child.id,
        state=child.state.value,
        built=dict(child.input_built or {}),
        skipped=child.state is ChildState.SKIPPED,
    )


class StepActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self._deps = deps

    async def _child(self, child_id: str) -> run_queries.ChildRecord:
        child = await self._deps.read(run_queries.get_child, child_id)
        if child is None:
            raise ApplicationError(
                f"unknown child {child_id}", type=ERR_PERMANENT, non_retryable=True
            )
        return child

    @activity.defn(name="build_step_input")
    async def build_step_input(self, params: StepInputInput) -> StepInputResult:
        """Build the chained child's input fields from its sources' rows, once; or skip it
        when a field comes out empty. Idempotent: a built or ended child is only reported."""
        deps = self._deps
        child = await self._child(params.child_id)
        if child.input_from is None or child.input_built_at is not None or child.state.terminal:
            return _result(child)
        run = await deps.read(run_queries.get_run, child.run_id)
        if run is None or run.aborted or run.stop_reason:
            # Stopped: nothing to build; the start (or the abort sweep) records it aborted.
            return _result(child)
        sources = {name: StepSource.from_stored(data) for name, data in child.input_from.items()}
        siblings = {c.idx: c for c in await deps.read(run_queries.get_children, child.run_id)}
        collectors = {name: ValueCollector(source) for name, source in sources.items()}
        for index in sorted({source.run for source in sources.values()}):
            source_child = siblings.get(index)
            if source_child is None:
                raise ApplicationError(
                    f"run {index} of {child.run_id} does not exist",
                    type=ERR_PERMANENT,
                    non_retryable=True,
                )
            if not source_child.state.terminal:
                # The workflow waits for its sources; a source read before it ended could
                # miss rows, so this is retried until it has.
                raise ApplicationError(
                    f"run {index} has not finished yet", type=ERR_SOURCE_NOT_FINISHED
                )
            await self._collect(
                child_id_of(child.run_id, index),
                [c for name, c in collectors.items() if sources[name].run == index],
            )
        empty = [name for name, c in collectors.items() if not c.values]
        if empty:
            name = empty[0]
            source = sources[name]
            origin = siblings[source.run]
            message = skip_message(
                name, source, origin.actor, origin.state.value, origin.items_ingested
            )
            data: dict[str, Any] = {
                "field": name,
                "sourceRun": source.run,
                "sourceActor": origin.actor,
                "sourceState": origin.state.value,
                "sourceRows": origin.items_ingested,
            }
            await deps.tx(step_queries.skip_child, child.id, message, data)
        else:
            built = {name: c.values for name, c in collectors.items()}
            size = len(json.dumps(child.input | built, separators=(",", ":")).encode("utf-8"))
            if size > deps.config.max_input_bytes:
                # As a submitted input would be refused: fail it rather than start it.
                await deps.tx(
                    run_queries.transition_child,
                    child.id,
                    ChildState.FAILED,
                    status_message=f"the input built from earlier runs is {size} bytes; at "
                    f"most {deps.config.max_input_bytes} bytes (lower inputFrom max)",
                )
                return _result(await self._child(child.id))
            if (problem := await self._schema_problem(child, child.input | built)) is not None:
                await deps.tx(
                    run_queries.transition_child,
                    child.id,
                    ChildState.FAILED,
                    status_message=f"the input built from earlier runs is not valid: {problem}",
                )
                return _result(await self._child(child.id))
            counts = ", ".join(f"{name}: {len(v)}" for name, v in built.items())
            await deps.tx(
                step_queries.record_built_input,
                child.id,
                built,
                f"actor run {child.idx} ({child.actor}): input built from earlier runs ({counts})",
            )
        return _result(await self._child(child.id))

    async def _schema_problem(
        self, child: run_queries.ChildRecord, built_input: dict[str, Any]
    ) -> str | None:
        """What the actor's catalog schema (as it is now) says of the completed input."""
        entry = await self._deps.read(registry.get_actor, child.actor)
        if entry is None:
            return None
        error = input_error(entry.input_schema, built_input)
        if error is None:
            return None
        return f"{error.pointer or '/'}: {error.message}"

    async def _collect(self, source_child_id: str, collectors: list[ValueCollector]) -> None:
        """Feed the source's rows, in item order and a page at a time, to ``collectors``
        until each is full or the rows end."""
        after = -1
        size = self._deps.config.dataset_page_size
        while not all(c.full for c in collectors):
            page = await self._deps.read(step_queries.rows_page, source_child_id, after, size)
            for index, text in page:
                row = json.loads(text)
                for collector in collectors:
                    collector.add(row)
                after = index
            activity.heartbeat(after)
            if len(page) < size:
                return
