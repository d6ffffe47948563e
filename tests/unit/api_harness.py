"""An in-process API for tests: the real app on a test database, a fake Temporal client.

The lifespan is not run (it would connect to Temporal); the app state is set directly. The
fake client records workflow starts, so "nothing was spawned" is directly observable.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
from sqlalchemy import Engine, Integer, delete, func, select
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from orchestrator.api.deps import AppState
from orchestrator.app import create_app
from orchestrator.config.bootstrap import bundled_registry_text
from orchestrator.config.settings import Settings
from orchestrator.db.queries.registry import load_registry_file, seed_registry
from orchestrator.db.schema import metadata, scrape_children, scrape_runs
from orchestrator.service.auth import create_key
from tests.support.secrets import TEST_CALLBACK_SECRET_KEY, TEST_SECRETS

CALLBACK_KEY = TEST_CALLBACK_SECRET_KEY


class _Handle:
    def __init__(self, owner: FakeTemporal, workflow_id: str) -> None:
        self.owner = owner
        self.workflow_id = workflow_id

    async def cancel(self) -> None:
        self.owner.cancelled.append(self.workflow_id)

    async def signal(self, name: str, arg: Any = None) -> None:
        self.owner.signalled.append((self.workflow_id, name))


@dataclass
class FakeTemporal:
    #: Workflow executions started, by id (a start of a running id finds it: USE_EXISTING).
    started: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    signalled: list[tuple[str, str]] = field(default_factory=list)
    #: Raised by the next start instead of starting (then cleared).
    fail_next_start: BaseException | None = None

    async def start_workflow(
        self,
        workflow: str,
        arg: Any,
        *,
        id: str,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.UNSPECIFIED,
        **_: Any,
    ) -> None:
        if self.fail_next_start is not None:
            failure, self.fail_next_start = self.fail_next_start, None
            raise failure
        if id in self.started:
            assert id_conflict_policy is WorkflowIDConflictPolicy.USE_EXISTING, id
            return
        self.started.append(id)

    def get_workflow_handle(self, workflow_id: str) -> _Handle:
        return _Handle(self, workflow_id)


@dataclass
class Api:
    client: httpx.AsyncClient
    engine: Engine
    temporal: FakeTemporal
    settings: Settings
    admin_key: str
    #: The app's state (set ``temporal`` to None to see the API without a workflow engine).
    state: AppState
    baseline: tuple[int, int] = (0, 0)
    #: The ASGI app itself (for clients other than ``client``, e.g. the CLI's).
    app: Any = None

    def auth(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def workspace_key(self, workspace: str) -> tuple[str, str | None]:
        """A new key for ``workspace`` and the workspace's callback secret if it was new."""
        with self.engine.begin() as conn:
            created = create_key(
                conn, workspace_id=workspace, name="test", callback_secret_key=CALLBACK_KEY
            )
        return created.plaintext, created.callback_secret

    def _totals(self) -> tuple[int, int]:
        with self.engine.connect() as conn:
            runs = conn.execute(select(func.count()).select_from(scrape_runs)).scalar_one()
            children = conn.execute(select(func.count()).select_from(scrape_children)).scalar_one()
        return int(runs), int(children)

    def counts(self) -> tuple[int, int]:
        """Requests and children created since this API was set up (the PostgreSQL test
        database is shared by the session)."""
        runs, children = self._totals()
        return runs - self.baseline[0], children - self.baseline[1]


def _snapshot(engine: Engine) -> dict[str, set[Any] | int]:
    """Primary keys present now (the max for integer ids), to delete what a test adds."""
    marks: dict[str, set[Any] | int] = {}
    with engine.connect() as conn:
        for table in metadata.sorted_tables:
            (pk,) = table.primary_key.columns
            if isinstance(pk.type, Integer):
                marks[table.name] = int(
                    conn.execute(select(func.coalesce(func.max(pk), 0))).scalar_one()
                )
            else:
                marks[table.name] = set(conn.execute(select(pk)).scalars())
    return marks


def _restore(engine: Engine, marks: dict[str, set[Any] | int]) -> None:
    with engine.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            (pk,) = table.primary_key.columns
            mark = marks[table.name]
            if isinstance(mark, int):
                conn.execute(delete(table).where(pk > mark))
            else:
                added = set(conn.execute(select(pk)).scalars()) - mark
                if added:
                    conn.execute(delete(table).where(pk.in_(added)))


@asynccontextmanager
async def api_for(engine: Engine, **overrides: Any) -> AsyncIterator[Api]:
    """The API on ``engine``; every row it adds is removed afterwards, because the
    PostgreSQL test database is shared by the whole session."""
    marks = _snapshot(engine)
    try:
        async with _api_for(engine, **overrides) as api:
            yield api
    finally:
        _restore(engine, marks)


@asynccontextmanager
async def _api_for(engine: Engine, **overrides: Any) -> AsyncIterator[Api]:
    database_url = engine.url.render_as_string(hide_password=False)
    settings = Settings(**({"database_url": database_url} | TEST_SECRETS | overrides))
    with engine.begin() as conn:
        # Overwrite: a test before this one may have edited the shared database's registry.
        seed_registry(conn, load_registry_file(bundled_registry_text()), overwrite=True)
        admin = create_key(conn, workspace_id=None, name="admin", callback_secret_key=CALLBACK_KEY)
    app = create_app(settings)
    temporal = FakeTemporal()
    state = AppState(settings=settings, engine=engine, temporal=cast(Client, temporal))
    app.state.orchestrator = state
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as client:
        api = Api(client, engine, temporal, settings, admin.plaintext, state, app=app)
        api.baseline = api._totals()
        yield api
