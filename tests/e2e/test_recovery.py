"""Killed and restarted processes: every row arrives exactly once, no run starts twice."""

from __future__ import annotations

import secrets
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from orchestrator.cli.devstack import DevStack
from tests.support.waiting import eventually

from .conftest import DATABASES, E2E_EMULATOR_TIME_SCALE, E2E_ENV, free_stack_ports, stack_on
from .support import (
    all_items,
    api_client,
    emulator_client,
    event_kinds,
    generator,
    platform_run_count,
    request,
    submit,
    wait_terminal,
)

pytestmark = pytest.mark.e2e

# Slow pages (the emulator scales pageDelayMs by its time scale) so a kill lands mid-ingest.
BIG = generator(items=30_000, itemBytes=200, durationSecs=1, pageDelayMs=600)


def ingested(api: httpx.Client, run_id: str) -> int:
    total: int = api.get(f"/runs/{run_id}").json()["itemsTotal"]
    return total


def assert_exactly_once(api: httpx.Client, run_id: str, expected: int) -> None:
    items = all_items(api, run_id)
    keys = [(i["childId"], i["itemIndex"]) for i in items]
    assert len(keys) == expected
    assert len(set(keys)) == expected
    assert sorted(k[1] for k in keys) == list(range(expected))


@DATABASES
def test_a_worker_killed_mid_ingest_loses_and_duplicates_nothing(
    request: pytest.FixtureRequest, database: str
) -> None:
    stack = stack_on(request, database)
    with api_client(stack) as api:
        run_id = submit(api, {"workspaceId": "ws_kill", "runs": [BIG]})
        eventually(lambda: 3_000 <= ingested(api, run_id) < 25_000, timeout=90)
        stack.kill("worker")
        stack.start_component("worker")
        run = wait_terminal(api, run_id, timeout=180)
        assert run["state"] == "succeeded"
        assert run["itemsTotal"] == 30_000
        assert_exactly_once(api, run_id, 30_000)
        assert event_kinds(api, run_id)["child.ingest_resume"] >= 1


def test_a_worker_killed_during_a_start_recovers_with_one_platform_run(
    stack: DevStack, emulator: httpx.Client
) -> None:
    """Issue 10 #5: the start heartbeats, so a start lost with its worker is retried (and its
    run found by the lost-start lookup) after the heartbeat timeout, not the 120 s
    start-to-close timeout; the wait below is shorter than that timeout."""
    # The platform creates the run and never answers: the start is in flight from the moment
    # the run exists until the HTTP start timeout (3 s in the e2e settings).
    emulator.post("/_emulator/faults/lost-start", json={"count": 1, "mode": "hang"})
    before = platform_run_count(emulator)
    with api_client(stack) as api:
        run_id = submit(api, request(generator(items=40, durationSecs=1)))
        eventually(lambda: platform_run_count(emulator) > before, timeout=30, interval=0.05)
        stack.kill("worker")
        stack.start_component("worker")
        run = wait_terminal(api, run_id, timeout=90)
        assert run["state"] == "succeeded"
        assert run["itemsTotal"] == 40
        kinds = event_kinds(api, run_id)
    # The first attempt died with its worker (it never timed out and logged an error); the
    # retry found the run that attempt had started instead of starting another.
    assert kinds["child.spawn_error"] == 0
    assert kinds["child.spawn_attempt"] == 1
    assert kinds["child.spawn_recovered"] == 1
    assert platform_run_count(emulator) - before == 1, "the platform started a second run"


def test_the_api_can_restart_at_any_time(stack: DevStack) -> None:
    with api_client(stack) as api:
        run_id = submit(api, request(generator(items=5_000, durationSecs=3, pageDelayMs=100)))
        stack.restart("api")
        run = wait_terminal(api, run_id)
        assert run["state"] == "succeeded"
        assert_exactly_once(api, run_id, 5_000)


def test_stopping_the_whole_stack_mid_run_and_starting_it_again(tmp_path: Path) -> None:
    """``orchestrator dev`` stopped with Ctrl-C and started again resumes work in flight."""
    dev_stack = DevStack(
        tmp_path / "var",
        free_stack_ports(),
        extra_env=E2E_ENV,
        emulator_time_scale=E2E_EMULATOR_TIME_SCALE,
        temporal_ui=False,
    )
    with dev_stack:
        with api_client(dev_stack) as api:
            run_id = submit(
                api,
                request(
                    BIG,
                    generator(items=700, durationSecs=20),
                    generator(items=50, durationSecs=1),
                ),
            )
            eventually(lambda: 1_000 <= ingested(api, run_id) < 25_000, timeout=90)
        dev_stack.stop()
        dev_stack.start()
        with api_client(dev_stack) as api, emulator_client(dev_stack) as emulator:
            run = wait_terminal(api, run_id, timeout=180)
            assert run["state"] == "succeeded"
            assert [c["itemsIngested"] for c in run["children"]] == [30_000, 700, 50]
            assert len(all_items(api, run_id)) == 30_750
            assert platform_run_count(emulator) == 3


def test_a_hundred_children_complete(stack: DevStack) -> None:
    with api_client(stack) as api:
        body = request(*[generator(items=20, durationSecs=2, seed=str(i)) for i in range(100)])
        run_id = submit(api, body)
        run = wait_terminal(api, run_id, timeout=240)
        assert run["state"] == "succeeded"
        assert run["counts"]["succeeded"] == 100
        assert run["itemsTotal"] == 2_000
        assert len(all_items(api, run_id)) == 2_000


def test_postgres_stack_stores_rows_in_postgres(
    pg_stack: DevStack, module_postgres_url: str
) -> None:
    with api_client(pg_stack) as api:
        marker = secrets.token_hex(4)
        run_id = submit(api, request(generator(items=10, seed=marker), workspace=f"ws_{marker}"))
        assert wait_terminal(api, run_id)["state"] == "succeeded"
    engine = create_engine(module_postgres_url)
    with engine.connect() as conn:
        count = conn.execute(
            text("SELECT count(*) FROM scrape_items WHERE run_id = :r"), {"r": run_id}
        ).scalar_one()
    engine.dispose()
    assert count == 10
