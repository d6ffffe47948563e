"""Workflow tests: a real local Temporal server, a fresh task queue per test, a fake platform."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from orchestrator.activities.deps import ActivityConfig, ActivityDeps
from orchestrator.config.bootstrap import bundled_registry_text
from orchestrator.db.engine import build_engine, migrate
from orchestrator.db.queries.registry import load_registry_file, seed_registry
from orchestrator.worker import build_worker
from tests.support.workers import running
from tests.workflows.activity_support import worker_config
from tests.workflows.fakes import FakePlatform

__all__ = ["Harness", "HarnessFactory", "seed", "worker_config"]


@dataclass
class Harness:
    env: WorkflowEnvironment
    engine: Engine
    platform: FakePlatform
    task_queue: str
    worker: Worker
    config: ActivityConfig


HarnessFactory = Callable[..., AbstractAsyncContextManager[Harness]]


def seed(engine: Engine) -> None:
    with engine.begin() as conn:
        seed_registry(conn, load_registry_file(bundled_registry_text()))


@pytest.fixture
def make_harness(temporal_env: WorkflowEnvironment) -> HarnessFactory:
    """Builds a worker on a fresh task queue with activity settings overridable per test."""

    @asynccontextmanager
    async def make(
        engine: Engine,
        *,
        task_queue: str | None = None,
        platform: FakePlatform | None = None,
        **overrides: Any,
    ) -> AsyncIterator[Harness]:
        """``task_queue`` and ``platform``: take over from an earlier (stopped) worker."""
        seed(engine)
        platform = platform or FakePlatform()
        config = worker_config(**overrides)
        deps = ActivityDeps(engine=engine, platform=platform, config=config)
        task_queue = task_queue or f"test-{uuid.uuid4()}"
        worker = build_worker(temporal_env.client, task_queue, deps)
        async with running(worker):
            yield Harness(temporal_env, engine, platform, task_queue, worker, config)

    return make


@pytest.fixture
async def harness(make_harness: HarnessFactory, sqlite_engine: Engine) -> AsyncIterator[Harness]:
    async with make_harness(sqlite_engine) as h:
        yield h


def _migrated(url: str) -> Iterator[Engine]:
    engine = build_engine(url)
    migrate(engine)
    yield engine
    engine.dispose()


def _sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'orchestrator.db'}"


@pytest.fixture
def request_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An engine on the database named by the test's ``database`` parameter."""
    name = request.node.callspec.params["database"]
    sqlite = name == "sqlite"
    yield from _migrated(
        _sqlite_url(tmp_path) if sqlite else request.getfixturevalue("postgres_url")
    )


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def own_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """SQLite, or PostgreSQL in this module's own database: other modules edit the shared
    database's actor registry, which would send these requests to other actors."""
    sqlite = request.param == "sqlite"
    yield from _migrated(
        _sqlite_url(tmp_path) if sqlite else request.getfixturevalue("module_postgres_url")
    )
