"""What activity tests are built from: the test workers' settings and stored requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from orchestrator.activities.deps import ActivityConfig, ActivityDeps
from orchestrator.activities.platform import PlatformActivities
from orchestrator.config.settings import Settings
from orchestrator.db.queries import runs as run_queries
from orchestrator.domain.ids import child_id, new_run_id
from orchestrator.worker import activity_config
from tests.support.secrets import TEST_SECRETS
from tests.workflows.fakes import FakePlatform

#: Settings of the test workers (overridable per test); every other value is the default of
#: ``config.settings.Settings``.
TEST_CONFIG: dict[str, Any] = {
    **TEST_SECRETS,
    "public_url": "http://127.0.0.1:9",
    "poll_interval_seconds": 1.0,
    "poll_long_wait_seconds": 0,
    "dataset_page_size": 7,
    "capacity_retry_seconds": 1.0,
    # Capacity shrunk by a 402 comes back at the next refresh of the account's limits.
    "account_limits_refresh_seconds": 1.0,
    "default_timeout_grace_seconds": 1.0,
    # Fake runs settle at once; tests of settling set their own.
    "usage_settle_seconds": 0.0,
    "usage_settle_interval_seconds": 0.05,
}


def worker_config(**overrides: Any) -> ActivityConfig:
    """The activity settings of a test worker, built as the real worker builds them."""
    return activity_config(Settings(_env_file=None, **(TEST_CONFIG | overrides)))


def store_request(
    engine: Engine, *options: dict[str, Any], keep_partial_rows: bool = True
) -> tuple[str, list[str]]:
    """A queued request with one pending child per ``options``; its id and child ids."""
    run_id = new_run_id()
    children = [
        run_queries.NewChild(
            id=child_id(run_id, i),
            idx=i,
            actor="ultron-leadgen",
            platform_actor_id="ultron~leadgen",
            input={"brief": "x"},
            options=opts,
        )
        for i, opts in enumerate(options)
    ]
    run = run_queries.NewRun(
        id=run_id,
        workspace_id="ws_activities",
        conversation_id=None,
        skill_run_id=None,
        callback_url=None,
        children=tuple(children),
        keep_partial_rows=keep_partial_rows,
    )
    with engine.begin() as conn:
        run_queries.insert_run(conn, run)
    return run_id, [c.id for c in children]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Like ``tests/conftest.py``'s, but PostgreSQL is the module's own database: other test
    modules count rows in the session's database, and activity tests write rows."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'orchestrator.db'}"
    url: str = request.getfixturevalue("module_postgres_url")
    return url


def activities(engine: Engine, platform: FakePlatform, **config: Any) -> PlatformActivities:
    """The platform activities on ``engine`` and a fake platform, as a worker builds them."""
    return PlatformActivities(
        ActivityDeps(engine=engine, platform=platform, config=worker_config(**config))
    )


def child(engine: Engine, cid: str) -> run_queries.ChildRecord:
    """The child's row as stored now."""
    with engine.connect() as conn:
        found = run_queries.get_child(conn, cid)
    assert found is not None
    return found
