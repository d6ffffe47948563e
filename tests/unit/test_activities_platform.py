"""The platform activities' decisions, without a Temporal server: ``ActivityEnvironment``, a
fake platform and a real database (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from orchestrator.activities.platform import webhook_url
from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.domain.lifecycle import ChildState
from orchestrator.platform.port import (
    ErrorKind,
    PlatformError,
    PlatformRun,
    RunWebhook,
    StartOptions,
)
from orchestrator.workflows.policies import ERR_CAPACITY, ERR_PERMANENT
from orchestrator.workflows.types import (
    AbortChildInput,
    PollInput,
    StartChildInput,
    StopChildInput,
    TimeOutChildInput,
)

# db_url replaces tests/conftest.py's: PostgreSQL is this module's own database.
from tests.workflows.activity_support import (  # noqa: F401
    activities,
    child,
    db_url,
    store_request,
    worker_config,
)
from tests.workflows.fakes import FakePlatform, Script, permanent

CAPACITY = PlatformError(
    ErrorKind.CAPACITY,
    "concurrent runs limit",
    status_code=402,
    error_type="concurrent-runs-limit-exceeded",
)


def kinds(engine: Engine, run_id: str) -> Counter[str]:
    with engine.connect() as conn:
        return Counter(e.kind for e in event_queries.list_events(conn, run_id, limit=1000))


def set_state(engine: Engine, cid: str, state: ChildState, **values: Any) -> None:
    with engine.begin() as conn:
        assert run_queries.transition_child(conn, cid, state, **values)


async def platform_run(platform: FakePlatform, cid: str, script: Script | None = None) -> str:
    """A run on the fake platform, started as an earlier attempt for ``cid`` would have."""
    if script is not None:
        platform.scripts["ultron~leadgen"] = script
    hooks: Sequence[RunWebhook] = [
        RunWebhook(
            event_types=("ACTOR.RUN.SUCCEEDED",),
            request_url=webhook_url(worker_config().public_url, cid),
            headers={},
        )
    ]
    run: PlatformRun = await platform.start_run("ultron~leadgen", {}, StartOptions(), hooks)
    return run.id


async def test_a_child_already_started_is_not_started_again(engine: Engine) -> None:
    platform = FakePlatform()
    _, (cid,) = store_request(engine, {"timeoutSec": 100})
    run_id = await platform_run(platform, cid)
    set_state(engine, cid, ChildState.RUNNING, platform_run_id=run_id, dataset_id=f"ds-{run_id}")
    result = await ActivityEnvironment().run(
        activities(engine, platform).start_actor_run, StartChildInput(child_id=cid)
    )
    assert result.started and result.platform_run_id == run_id
    assert result.cap_seconds == 101.0  # timeoutSec + the test grace of 1 s
    assert len(platform.starts) == 1 and platform.lookups == 0


async def test_a_child_of_an_aborted_request_is_aborted_not_started(engine: Engine) -> None:
    platform = FakePlatform()
    run_id, (cid,) = store_request(engine, {})
    with engine.begin() as conn:
        assert run_queries.mark_aborted(conn, run_id)
    result = await ActivityEnvironment().run(
        activities(engine, platform).start_actor_run, StartChildInput(child_id=cid)
    )
    assert not result.started
    assert child(engine, cid).state is ChildState.ABORTED
    assert platform.starts == []


async def test_a_lost_start_found_on_the_platform_is_adopted(engine: Engine) -> None:
    platform = FakePlatform()
    run_id, (cid,) = store_request(engine, {})
    set_state(engine, cid, ChildState.SPAWNING)  # an earlier attempt sent the start
    existing = await platform_run(platform, cid)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2)
    result = await env.run(
        activities(engine, platform).start_actor_run, StartChildInput(child_id=cid)
    )
    assert result.started and result.platform_run_id == existing
    assert len(platform.starts) == 1, "a second platform run was started"
    assert child(engine, cid).state is ChildState.RUNNING
    assert kinds(engine, run_id)["child.spawn_recovered"] == 1


async def test_a_lost_start_not_found_is_sent_again(engine: Engine) -> None:
    platform = FakePlatform()
    run_id, (cid,) = store_request(engine, {})
    set_state(engine, cid, ChildState.SPAWNING)
    result = await ActivityEnvironment().run(
        activities(engine, platform).start_actor_run, StartChildInput(child_id=cid)
    )
    assert result.started and platform.lookups == 1 and len(platform.starts) == 1
    found = kinds(engine, run_id)
    assert found["child.spawn_lookup"] == 1 and found["child.spawn_recovered"] == 0
    assert found["child.spawn_attempt"] == 1


async def test_a_permanent_start_error_fails_the_child_without_a_retry(engine: Engine) -> None:
    platform = FakePlatform()
    platform.scripts["ultron~leadgen"] = Script(start_errors=[permanent("bad memory")])
    _, (cid,) = store_request(engine, {})
    result = await ActivityEnvironment().run(
        activities(engine, platform).start_actor_run, StartChildInput(child_id=cid)
    )
    assert not result.started and result.failure == "bad memory"
    assert child(engine, cid).state is ChildState.FAILED


async def test_a_capacity_error_is_retried_after_the_capacity_wait(engine: Engine) -> None:
    platform = FakePlatform()
    platform.scripts["ultron~leadgen"] = Script(start_errors=[CAPACITY])
    run_id, (cid,) = store_request(engine, {})
    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(
            activities(engine, platform, capacity_retry_seconds=42.0).start_actor_run,
            StartChildInput(child_id=cid),
        )
    assert raised.value.type == ERR_CAPACITY and not raised.value.non_retryable
    assert raised.value.next_retry_delay == timedelta(seconds=42)
    assert child(engine, cid).state is ChildState.SPAWNING
    assert kinds(engine, run_id)["child.spawn_error"] == 1


class SlowStarts(FakePlatform):
    """Starts that take a while, so a heartbeat or a cancellation lands during one."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.entered = asyncio.Event()

    async def start_run(self, *args: Any, **kwargs: Any) -> PlatformRun:
        self.entered.set()
        await self.release.wait()
        return await super().start_run(*args, **kwargs)


async def test_a_start_in_flight_heartbeats(engine: Engine) -> None:
    platform = SlowStarts()
    _, (cid,) = store_request(engine, {})
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=0.03))
    beats: list[object] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    task = asyncio.ensure_future(
        env.run(activities(engine, platform).start_actor_run, StartChildInput(child_id=cid))
    )
    await platform.entered.wait()

    async def three_beats() -> None:
        while len(beats) < 3:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(three_beats(), timeout=10)
    platform.release.set()
    result = await task
    assert result.started and len(platform.starts) == 1


async def test_a_start_cancelled_in_flight_still_records_its_run(engine: Engine) -> None:
    """An abort must not lose a run the platform may already have started."""
    platform = SlowStarts()
    _, (cid,) = store_request(engine, {})
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=1))
    task = asyncio.ensure_future(
        env.run(activities(engine, platform).start_actor_run, StartChildInput(child_id=cid))
    )
    await platform.entered.wait()
    env.cancel()
    await asyncio.sleep(0.05)
    platform.release.set()
    result = await task
    assert result.started and result.platform_run_id is not None
    assert child(engine, cid).platform_run_id == result.platform_run_id


async def test_a_poll_records_a_non_terminal_and_a_terminal_status(engine: Engine) -> None:
    platform = FakePlatform()
    _, (cid,) = store_request(engine, {})
    run_id = await platform_run(platform, cid, Script(polls_to_finish=2))
    set_state(engine, cid, ChildState.RUNNING, platform_run_id=run_id, dataset_id=f"ds-{run_id}")
    poll = activities(engine, platform).poll_platform_run
    params = PollInput(child_id=cid, platform_run_id=run_id)
    first = await ActivityEnvironment().run(poll, params)
    assert (first.status, first.terminal, first.child_state) == ("RUNNING", False, None)
    assert child(engine, cid).state is ChildState.RUNNING
    second = await ActivityEnvironment().run(poll, params)
    assert second.terminal and second.succeeded and second.child_state == "ingesting"
    assert child(engine, cid).state is ChildState.INGESTING


async def test_a_poll_of_a_run_the_platform_does_not_know_is_permanent(engine: Engine) -> None:
    _, (cid,) = store_request(engine, {})
    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(
            activities(engine, FakePlatform()).poll_platform_run,
            PollInput(child_id=cid, platform_run_id="nope"),
        )
    assert raised.value.type == ERR_PERMANENT and raised.value.non_retryable


async def test_aborting_a_child_without_a_platform_run(engine: Engine) -> None:
    platform = FakePlatform()
    run_id, (cid,) = store_request(engine, {})
    result = await ActivityEnvironment().run(
        activities(engine, platform).abort_child, AbortChildInput(child_id=cid)
    )
    assert result.state == "aborted"
    assert child(engine, cid).state is ChildState.ABORTED
    assert kinds(engine, run_id)["child.abort"] == 0


async def test_aborting_a_running_child_confirms_the_platform_status(engine: Engine) -> None:
    platform = FakePlatform()
    run_id, (cid,) = store_request(engine, {})
    pid = await platform_run(platform, cid, Script(polls_to_finish=10**9))
    set_state(engine, cid, ChildState.RUNNING, platform_run_id=pid, dataset_id=f"ds-{pid}")
    abort = activities(engine, platform).abort_child
    await ActivityEnvironment().run(abort, AbortChildInput(child_id=cid))
    aborted = child(engine, cid)
    assert aborted.state is ChildState.ABORTED and aborted.platform_status == "ABORTED"
    assert platform.runs[pid].aborted
    # Idempotent: again, nothing more happens.
    again = await ActivityEnvironment().run(abort, AbortChildInput(child_id=cid))
    assert again.state == "aborted" and kinds(engine, run_id)["child.abort"] == 1


async def test_a_child_past_its_cap_is_aborted_on_the_platform_then_timed_out(
    engine: Engine,
) -> None:
    platform = FakePlatform()
    run_id, (cid,) = store_request(engine, {"timeoutSec": 1})
    pid = await platform_run(platform, cid, Script(polls_to_finish=10**9))
    set_state(engine, cid, ChildState.RUNNING, platform_run_id=pid, dataset_id=f"ds-{pid}")
    await ActivityEnvironment().run(
        activities(engine, platform).time_out_child,
        TimeOutChildInput(child_id=cid, message="no final status within 2 s"),
    )
    timed_out = child(engine, cid)
    assert timed_out.state is ChildState.TIMED_OUT
    assert timed_out.platform_status == "ABORTED"
    assert timed_out.status_message == "no final status within 2 s"
    assert platform.runs[pid].aborted
    assert kinds(engine, run_id)["child.abort"] == 1


async def test_every_stored_option_reaches_the_platform_start(engine: Engine) -> None:
    platform = FakePlatform()
    stored = {"memoryMb": 512, "timeoutSec": 60, "build": "beta", "maxItems": 7}
    _, (cid,) = store_request(engine, {**stored, "maxTotalChargeUsd": 1.25})
    result = await ActivityEnvironment().run(
        activities(engine, platform).start_actor_run, StartChildInput(child_id=cid)
    )
    assert result.started
    assert platform.start_options == [
        StartOptions(
            memory_mb=512, timeout_sec=60, build="beta", max_items=7, max_total_charge_usd=1.25
        )
    ]


@pytest.mark.parametrize(
    ("keep_partial", "flag", "recorded", "partial_state"),
    [
        (True, True, ChildState.INGESTING, "failed"),
        (True, False, ChildState.FAILED, None),  # the request turned it off
        (False, True, ChildState.FAILED, None),  # a poller from before partial rows
    ],
)
async def test_a_failed_run_is_ingested_first_when_its_rows_are_kept(
    engine: Engine,
    keep_partial: bool,
    flag: bool,
    recorded: ChildState,
    partial_state: str | None,
) -> None:
    platform = FakePlatform()
    _, (cid,) = store_request(engine, {}, keep_partial_rows=flag)
    pid = await platform_run(platform, cid, Script(final_status="FAILED", status_message="boom"))
    set_state(engine, cid, ChildState.RUNNING, platform_run_id=pid, dataset_id=f"ds-{pid}")
    result = await ActivityEnvironment().run(
        activities(engine, platform).poll_platform_run,
        PollInput(child_id=cid, platform_run_id=pid, keep_partial=keep_partial),
    )
    assert result.terminal and not result.succeeded
    assert (result.child_state, result.partial_state) == (recorded.value, partial_state)
    polled = child(engine, cid)
    assert polled.state is recorded and polled.status_message == "boom"


async def test_stopping_a_child_that_keeps_rows_leaves_it_ingesting_once(engine: Engine) -> None:
    platform = FakePlatform()
    run_id, (cid,) = store_request(engine, {})
    pid = await platform_run(platform, cid, Script(polls_to_finish=10**9))
    set_state(engine, cid, ChildState.RUNNING, platform_run_id=pid, dataset_id=f"ds-{pid}")
    stop = activities(engine, platform).stop_child
    params = StopChildInput(child_id=cid, state="aborted", message="aborted by the caller")
    first = await ActivityEnvironment().run(stop, params)
    assert first.state == "ingesting" and platform.runs[pid].aborted
    assert first.ingest is not None
    assert (first.ingest.final_state, first.ingest.dataset_id) == ("aborted", f"ds-{pid}")
    assert first.ingest.final_message == "aborted by the caller (platform status ABORTED)"
    assert child(engine, cid).state is ChildState.INGESTING
    # The other side of the race (poller and master's sweep): the same ingest, no new abort.
    reads = platform.runs[pid].reads
    second = await ActivityEnvironment().run(stop, params)
    assert second.ingest is not None and second.ingest.final_state == "aborted"
    assert platform.runs[pid].reads == reads and kinds(engine, run_id)["child.abort"] == 1


async def test_stopping_keeps_a_failed_run_failed(engine: Engine) -> None:
    platform = FakePlatform()
    _, (cid,) = store_request(engine, {})
    pid = await platform_run(platform, cid, Script(final_status="FAILED"))
    set_state(engine, cid, ChildState.RUNNING, platform_run_id=pid, dataset_id=f"ds-{pid}")
    set_state(
        engine, cid, ChildState.INGESTING, platform_status="FAILED", status_message="it crashed"
    )
    result = await ActivityEnvironment().run(
        activities(engine, platform).stop_child,
        StopChildInput(child_id=cid, state="aborted", message="aborted by the caller"),
    )
    assert result.ingest is not None
    assert (result.ingest.final_state, result.ingest.final_message) == ("failed", "it crashed")
    assert not platform.runs[pid].aborted


async def test_stopping_without_kept_rows_ends_the_child_at_once(engine: Engine) -> None:
    platform = FakePlatform()
    run_id, (cid,) = store_request(engine, {}, keep_partial_rows=False)
    pid = await platform_run(platform, cid, Script(polls_to_finish=10**9))
    set_state(engine, cid, ChildState.RUNNING, platform_run_id=pid, dataset_id=f"ds-{pid}")
    result = await ActivityEnvironment().run(
        activities(engine, platform).stop_child,
        StopChildInput(child_id=cid, state="timed_out", message="past its cap"),
    )
    assert result.state == "timed_out" and result.ingest is None
    stopped = child(engine, cid)
    assert stopped.state is ChildState.TIMED_OUT and stopped.platform_status == "ABORTED"
    assert kinds(engine, run_id)["child.abort"] == 1
