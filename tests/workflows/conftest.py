"""Workflow tests: a real local Temporal server, a fresh task queue per test, a fake platform."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from orchestrator.activities.deps import ActivityConfig, ActivityDeps
from orchestrator.config.bootstrap import bundled_registry_text
from orchestrator.db.queries.registry import load_registry_file, seed_registry
from orchestrator.worker import build_worker
from tests.workflows.fakes import FakePlatform


@dataclass
class Harness:
    env: WorkflowEnvironment
    engine: Engine
    platform: FakePlatform
    task_queue: str
    worker: Worker


@pytest.fixture
async def harness(
    temporal_env: WorkflowEnvironment, sqlite_engine: Engine
) -> AsyncIterator[Harness]:
    with sqlite_engine.begin() as conn:
        seed_registry(conn, load_registry_file(bundled_registry_text()))
    platform = FakePlatform()
    deps = ActivityDeps(
        engine=sqlite_engine,
        platform=platform,
        config=ActivityConfig(
            public_url="http://127.0.0.1:9",
            webhook_secret="test-secret",
            poll_interval_seconds=1.0,
            dataset_page_size=7,
        ),
    )
    task_queue = f"test-{uuid.uuid4()}"
    worker = build_worker(temporal_env.client, task_queue, deps)
    async with worker:
        yield Harness(temporal_env, sqlite_engine, platform, task_queue, worker)
