"""Recording and settling what a platform run cost: ``poll_platform_run`` and
``settle_usage`` under ``ActivityEnvironment``, a fake platform, SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine
from temporalio.testing import ActivityEnvironment

from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.domain.lifecycle import ChildState
from orchestrator.platform.port import StartOptions
from orchestrator.workflows.types import PollInput, SettleUsageInput

# db_url replaces tests/conftest.py's: PostgreSQL is this module's own database.
from tests.workflows.activity_support import (  # noqa: F401
    activities,
    child,
    db_url,
    store_request,
    worker_config,
)
from tests.workflows.fakes import FakePlatform, Script


def events(engine: Engine, run_id: str, kind: str) -> list[dict[str, Any]]:
    """The data of each event of ``kind``, in order."""
    with engine.connect() as conn:
        found = event_queries.list_events(conn, run_id, limit=1000)
    return [e.data or {} for e in found if e.kind == kind]


async def started(engine: Engine, platform: FakePlatform, script: Script) -> tuple[str, str, str]:
    """A request with one child running on the fake platform: run id, child id, platform id."""
    run_id, (cid,) = store_request(engine, {})
    platform.scripts["ultron~leadgen"] = script
    platform_run = await platform.start_run("ultron~leadgen", {}, StartOptions())
    with engine.begin() as conn:
        assert run_queries.transition_child(
            conn, cid, ChildState.RUNNING, platform_run_id=platform_run.id, dataset_id="ds"
        )
    return run_id, cid, platform_run.id


async def test_polls_record_usage_and_never_lower_it(engine: Engine) -> None:
    platform = FakePlatform()
    script = Script(
        polls_to_finish=4,
        usage=[0.1, 0.3, 0.2],  # the third read lags behind the second
        charged=[{"lead": 1}, {"lead": 3, "apify-actor-start": 1}, {"lead": 2}],
    )
    run_id, cid, prid = await started(engine, platform, script)
    acts = activities(engine, platform)
    for _ in range(3):
        result = await ActivityEnvironment().run(
            acts.poll_platform_run, PollInput(child_id=cid, platform_run_id=prid)
        )
        assert not result.terminal
    recorded = child(engine, cid)
    assert recorded.usage_total_usd == 0.3
    assert recorded.charged_event_counts == {"lead": 3, "apify-actor-start": 1}
    assert recorded.usage_settled_at is None
    polls = events(engine, run_id, "child.poll")
    assert [e["usageTotalUsd"] for e in polls] == [0.1, 0.3, 0.2]  # what each read said
    assert polls[1]["chargedEventCounts"] == {"lead": 3, "apify-actor-start": 1}


async def test_settling_reads_until_two_reads_agree_and_is_idempotent(engine: Engine) -> None:
    platform = FakePlatform()
    # Read 1 (the poll) sees the end; the figure still grows for two reads, then holds.
    script = Script(polls_to_finish=1, usage=[0.1, 0.2, 0.25, 0.25, 0.25])
    run_id, cid, prid = await started(engine, platform, script)
    acts = activities(engine, platform)
    poll = await ActivityEnvironment().run(
        acts.poll_platform_run, PollInput(child_id=cid, platform_run_id=prid)
    )
    assert poll.terminal and child(engine, cid).usage_total_usd == 0.1
    settled = await ActivityEnvironment().run(acts.settle_usage, SettleUsageInput(child_id=cid))
    assert settled.settled and settled.usage_total_usd == 0.25
    assert settled.reads == 3  # 0.2, 0.25, 0.25: the last two agree
    assert platform.runs[prid].reads == 4
    recorded = child(engine, cid)
    assert recorded.usage_total_usd == 0.25 and recorded.usage_settled_at is not None
    (event,) = events(engine, run_id, "child.usage_settled")
    assert event["usageTotalUsd"] == 0.25 and event["stable"] is True
    # Again (a retried activity, a replayed poller): nothing is read or recorded.
    again = await ActivityEnvironment().run(acts.settle_usage, SettleUsageInput(child_id=cid))
    assert again.settled and again.reads == 0 and again.usage_total_usd == 0.25
    assert platform.runs[prid].reads == 4
    assert len(events(engine, run_id, "child.usage_settled")) == 1


async def test_a_first_read_inside_the_settle_window_is_not_trusted(engine: Engine) -> None:
    platform = FakePlatform()
    # The first read sees the run just ended (finishedAt is now): it is inside the settle
    # window, so agreeing with the next read proves nothing. Reads after the window are
    # compared: 0.5 (after the wait), 0.7, 0.7.
    script = Script(polls_to_finish=1, usage=[0.5, 0.5, 0.7, 0.7])
    _, cid, _ = await started(engine, platform, script)
    acts = activities(engine, platform, usage_settle_seconds=0.3)
    settled = await ActivityEnvironment().run(acts.settle_usage, SettleUsageInput(child_id=cid))
    assert settled.reads == 4 and settled.usage_total_usd == 0.7
    assert child(engine, cid).usage_total_usd == 0.7


async def test_a_first_read_after_the_settle_window_counts(engine: Engine) -> None:
    platform = FakePlatform()
    script = Script(polls_to_finish=1, usage=[0.5, 0.5, 0.7, 0.7])
    _, cid, _ = await started(engine, platform, script)
    acts = activities(engine, platform)  # the test window is 0 s: the finish is long past
    settled = await ActivityEnvironment().run(acts.settle_usage, SettleUsageInput(child_id=cid))
    assert settled.reads == 2 and settled.usage_total_usd == 0.5


async def test_settling_stops_after_the_most_reads_and_keeps_the_highest(engine: Engine) -> None:
    platform = FakePlatform()
    script = Script(polls_to_finish=1, usage=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
    run_id, cid, _ = await started(engine, platform, script)
    acts = activities(engine, platform, usage_settle_max_reads=3)
    settled = await ActivityEnvironment().run(acts.settle_usage, SettleUsageInput(child_id=cid))
    assert settled.settled and settled.reads == 3 and settled.usage_total_usd == 0.3
    (event,) = events(engine, run_id, "child.usage_settled")
    assert event["stable"] is False


async def test_a_run_that_has_not_ended_is_recorded_not_settled(engine: Engine) -> None:
    platform = FakePlatform()
    script = Script(polls_to_finish=10, usage=[0.4])
    run_id, cid, _ = await started(engine, platform, script)
    settled = await ActivityEnvironment().run(
        activities(engine, platform).settle_usage, SettleUsageInput(child_id=cid)
    )
    assert not settled.settled and settled.reads == 1
    recorded = child(engine, cid)
    assert recorded.usage_total_usd == 0.4 and recorded.usage_settled_at is None
    assert events(engine, run_id, "child.usage_settled") == []


async def test_a_child_without_a_platform_run_has_nothing_to_settle(engine: Engine) -> None:
    platform = FakePlatform()
    _, (cid,) = store_request(engine, {})
    settled = await ActivityEnvironment().run(
        activities(engine, platform).settle_usage, SettleUsageInput(child_id=cid)
    )
    assert not settled.settled and settled.reads == 0 and settled.usage_total_usd is None
