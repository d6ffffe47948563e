"""The test harness's worker shutdown limit (tests/support/workers.py): a worker whose
shutdown cannot finish is abandoned with a warning naming what it waits for, and the test
goes on instead of hanging the session."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.support.waiting import eventually_async
from tests.support.workers import WorkerShutdownHung, running

release = asyncio.Event()
entered = asyncio.Event()


@activity.defn(name="ignores_cancellation")
async def ignores_cancellation() -> None:
    entered.set()
    while not release.is_set():
        try:
            await release.wait()
        except asyncio.CancelledError:
            continue  # what a misbehaving activity does: the shutdown waits for it


@workflow.defn(name="CallsStubbornActivity", sandboxed=False)
class CallsStubbornActivity:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity(
            ignores_cancellation, start_to_close_timeout=timedelta(minutes=5)
        )


async def test_a_worker_that_cannot_shut_down_is_abandoned_with_its_tasks_stacks(
    temporal_env: WorkflowEnvironment,
) -> None:
    task_queue = f"test-{uuid.uuid4()}"
    worker = Worker(
        temporal_env.client,
        task_queue=task_queue,
        workflows=[CallsStubbornActivity],
        activities=[ignores_cancellation],
    )
    try:
        with pytest.warns(WorkerShutdownHung, match="ignores_cancellation") as caught:
            async with running(worker, limit_seconds=1.0):
                await temporal_env.client.start_workflow(
                    CallsStubbornActivity.run,
                    id=f"stubborn-{uuid.uuid4()}",
                    task_queue=task_queue,
                )
                await asyncio.wait_for(entered.wait(), 30)
        assert task_queue in str(caught[0].message)
    finally:
        # Once the activity gives in, the abandoned worker finishes shutting down by itself.
        release.set()
    await eventually_async(lambda: worker.is_shutdown, description="worker shut down")
