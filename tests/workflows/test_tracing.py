"""With tracing on, a request is one trace: submission, the master, its poller, activities."""

from __future__ import annotations

import asyncio
import uuid

from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import Engine
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from orchestrator.activities.deps import ActivityDeps
from orchestrator.config.settings import Settings
from orchestrator.domain.ids import orchestrator_workflow_id
from orchestrator.domain.lifecycle import RunState
from orchestrator.observability.tracing import (
    tracer_provider,
    tracing_interceptor,
    tracing_interceptors,
)
from orchestrator.service import submission
from orchestrator.worker import build_worker
from orchestrator.workflows.types import OrchestratorResult
from tests.support.workers import running
from tests.workflows.conftest import seed, worker_config
from tests.workflows.fakes import FakePlatform, Script
from tests.workflows.support import request


def test_tracing_is_off_by_default() -> None:
    assert tracing_interceptors(Settings(_env_file=None), "orchestrator-test") == []


async def test_a_traced_request_makes_spans_from_submission_to_ingest(
    temporal_env: WorkflowEnvironment, sqlite_engine: Engine
) -> None:
    exporter = InMemorySpanExporter()
    provider = tracer_provider("orchestrator-test", SimpleSpanProcessor(exporter))
    config = temporal_env.client.config()
    config["interceptors"] = [tracing_interceptor(provider)]
    client = Client(**config)
    seed(sqlite_engine)
    platform = FakePlatform()
    platform.scripts["ultron~leadgen"] = Script(items=3)
    deps = ActivityDeps(engine=sqlite_engine, platform=platform, config=worker_config())
    task_queue = f"test-{uuid.uuid4()}"
    async with running(build_worker(client, task_queue, deps)):
        body = request({"actor": "ultron-leadgen", "input": {"brief": "b"}})
        run = (await submission.submit(sqlite_engine, client, task_queue, body)).run
        handle = client.get_workflow_handle(
            orchestrator_workflow_id(run.id), result_type=OrchestratorResult
        )
        result = await asyncio.wait_for(handle.result(), timeout=60)
    assert result.state == RunState.SUCCEEDED
    provider.force_flush()
    spans = exporter.get_finished_spans()
    names = {span.name for span in spans}
    for expected in (
        "StartWorkflow:ScraperOrchestrator",
        "RunWorkflow:ScraperOrchestrator",
        "StartActivity:start_actor_run",
        "RunActivity:start_actor_run",
        # The start activity starts the child's poller, through the worker's client.
        "StartWorkflow:PollerWorkflowV2",
        "RunWorkflow:PollerWorkflowV2",
        "RunActivity:look_and_finish",
    ):
        assert expected in names, f"{expected} not among {sorted(names)}"
    # One trace: the submission's span is the root of everything the workers did.
    assert len({span.context.trace_id for span in spans if span.context is not None}) == 1
    (service,) = {span.resource.attributes["service.name"] for span in spans}
    assert service == "orchestrator-test"
