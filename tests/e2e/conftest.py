"""Fixtures for end-to-end tests: one real local stack per test session.

The ``stack`` fixture starts the Temporal dev server, the platform emulator, the API and
the worker (``DevStack``) on free ports with a throw-away var dir, short poll intervals and
fast scripted runs. When a test that used it fails, the tail of every component's log is
attached to the failure report. Fixtures are sync on purpose: pytest-asyncio runs one
session loop, and a sync fixture cannot interfere with it.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator

import httpx
import pytest
from bench.stack import free_ports

from orchestrator.cli.devstack import DevStack, StackPorts

from .support import emulator_client

#: Settings for the session's stack: fast polling, scripted runs at a fifth of their length.
E2E_POLL_INTERVAL_SECONDS = "2"
E2E_EMULATOR_TIME_SCALE = 0.2


def free_stack_ports() -> StackPorts:
    """A :class:`StackPorts` made of free ports."""
    temporal, temporal_ui, emulator, api, worker_metrics, temporal_metrics = free_ports(6)
    return StackPorts(
        temporal=temporal,
        temporal_ui=temporal_ui,
        emulator=emulator,
        api=api,
        worker_metrics=worker_metrics,
        temporal_metrics=temporal_metrics,
    )


# Short waits everywhere, so faults and recoveries show within seconds.
E2E_ENV = {
    "ORCHESTRATOR_POLL_INTERVAL_SECONDS": E2E_POLL_INTERVAL_SECONDS,
    "ORCHESTRATOR_POLL_LONG_WAIT_SECONDS": "1",
    "ORCHESTRATOR_CAPACITY_RETRY_SECONDS": "1",
    "ORCHESTRATOR_PLATFORM_START_TIMEOUT_SECONDS": "3",
    "ORCHESTRATOR_INGEST_HEARTBEAT_SECONDS": "4",
    "ORCHESTRATOR_DEFAULT_TIMEOUT_GRACE_SECONDS": "2",
    # The emulator's usage settles usage_lag_secs (5 s) x the time scale after the finish.
    "ORCHESTRATOR_USAGE_SETTLE_SECONDS": str(5 * E2E_EMULATOR_TIME_SCALE + 0.5),
    "ORCHESTRATOR_USAGE_SETTLE_INTERVAL_SECONDS": "0.5",
}


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    """The whole local stack, started once per session; see ``DevStack.urls``/``.env``."""
    var_dir = tmp_path_factory.mktemp("stack")
    dev_stack = DevStack(
        var_dir,
        free_stack_ports(),
        extra_env=E2E_ENV,
        emulator_time_scale=E2E_EMULATOR_TIME_SCALE,
        temporal_ui=False,
    )
    with dev_stack:
        yield dev_stack


@pytest.fixture
def emulator(stack: DevStack) -> Iterator[httpx.Client]:
    """The session stack's emulator (token set); every fault a test adds is removed after."""
    with emulator_client(stack) as client:
        client.delete("/_emulator/faults").raise_for_status()
        yield client
        client.delete("/_emulator/faults").raise_for_status()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach every component's log tail to the report of a failed test that used a stack."""
    report = yield
    if report.failed and report.when in ("call", "setup"):
        funcargs = getattr(item, "funcargs", {})
        for value in funcargs.values():
            if isinstance(value, DevStack):
                report.sections.append(("component logs", value.log_tails()))
    return report


@pytest.fixture(scope="module")
def pg_stack(
    tmp_path_factory: pytest.TempPathFactory, module_postgres_url: str
) -> Iterator[DevStack]:
    """A second stack whose app database is PostgreSQL."""
    dev_stack = DevStack(
        tmp_path_factory.mktemp("pg-stack"),
        free_stack_ports(),
        extra_env=E2E_ENV | {"ORCHESTRATOR_DATABASE_URL": module_postgres_url},
        emulator_time_scale=E2E_EMULATOR_TIME_SCALE,
        temporal_ui=False,
    )
    with dev_stack:
        yield dev_stack


DATABASES = pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)


def stack_on(request: pytest.FixtureRequest, database: str) -> DevStack:
    """The session's stack (SQLite) or the module's stack on PostgreSQL (``pg_stack``)."""
    stack: DevStack = request.getfixturevalue("stack" if database == "sqlite" else "pg_stack")
    return stack
