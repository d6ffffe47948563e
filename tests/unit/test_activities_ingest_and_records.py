"""The ingest and record activities' decisions, without a Temporal server: a resumed ingest
stores each row once, outcomes and the header are recorded (SQLite and PostgreSQL)."""

from __future__ import annotations

import dataclasses
import json

from sqlalchemy import Engine, select
from temporalio.testing import ActivityEnvironment

from orchestrator.activities.deps import ActivityDeps
from orchestrator.activities.ingest import IngestActivities
from orchestrator.activities.records import RecordActivities
from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries import items as item_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.schema import scrape_items
from orchestrator.domain.lifecycle import ChildState, RunState
from orchestrator.platform.port import StartOptions
from orchestrator.workflows.types import ChildOutcomeInput, FinalizeInput, IngestInput

# db_url replaces tests/conftest.py's: PostgreSQL is this module's own database.
from tests.workflows.activity_support import db_url, store_request, worker_config  # noqa: F401
from tests.workflows.fakes import FakePlatform, Script


def deps(engine: Engine, platform: FakePlatform) -> ActivityDeps:
    return ActivityDeps(engine=engine, platform=platform, config=worker_config())


def get_child(engine: Engine, cid: str) -> run_queries.ChildRecord:
    with engine.connect() as conn:
        found = run_queries.get_child(conn, cid)
    assert found is not None
    return found


def stored_indexes(engine: Engine, cid: str) -> list[int]:
    with engine.connect() as conn:
        indexes = conn.execute(
            select(scrape_items.c.item_index).where(scrape_items.c.child_id == cid)
        ).scalars()
        return sorted(indexes)


async def ingesting_child(engine: Engine, platform: FakePlatform, items: int) -> tuple[str, str]:
    """A child whose platform run succeeded with ``items`` items, waiting to be ingested."""
    platform.scripts["ultron~leadgen"] = Script(items=items)
    run_id, (cid,) = store_request(engine, {})
    run = await platform.start_run("ultron~leadgen", {}, StartOptions())
    with engine.begin() as conn:
        run_queries.transition_child(
            conn, cid, ChildState.RUNNING, platform_run_id=run.id, dataset_id=run.dataset_id
        )
        run_queries.transition_child(conn, cid, ChildState.INGESTING)
    return run_id, cid


async def test_an_ingest_resumes_at_its_committed_offset(engine: Engine) -> None:
    platform = FakePlatform()
    run_id, cid = await ingesting_child(engine, platform, items=20)
    child = get_child(engine, cid)
    assert child.dataset_id is not None
    # An earlier attempt committed the first page (7 items, the test page size) and died.
    first_page = [json.dumps({"index": i, "actor": "ultron~leadgen"}).encode() for i in range(7)]
    with engine.begin() as conn:
        run = run_queries.get_run(conn, run_id)
        assert run is not None
        item_queries.write_page(conn, run, child, 0, first_page)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2)
    beats: list[object] = []
    env.on_heartbeat = lambda *details: beats.extend(details)
    result = await env.run(
        IngestActivities(deps(engine, platform)).ingest_dataset,
        IngestInput(child_id=cid, dataset_id=child.dataset_id),
    )
    assert (result.items, result.pages) == (20, 2)  # 7..13 and 14..19: no page read twice
    assert beats == [14, 20]
    assert stored_indexes(engine, cid) == list(range(20))
    with engine.connect() as conn:
        resumed = [
            e for e in event_queries.list_events(conn, run_id) if e.kind == "child.ingest_resume"
        ]
    assert len(resumed) == 1 and resumed[0].data == {"offset": 7, "attempt": 2}
    ended = get_child(engine, cid)
    assert ended.state is ChildState.SUCCEEDED and ended.items_ingested == 20


class _EarlierAttempt(FakePlatform):
    """An earlier attempt of the same ingest, still alive: it stores the second page (and
    moves the cursor) while this attempt is downloading that page."""

    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self.engine = engine
        self.run_id = ""  # the request, once stored

    async def dataset_page(self, dataset_id: str, offset: int, limit: int) -> list[bytes]:
        page = await super().dataset_page(dataset_id, offset, limit)
        if offset == 7:
            with self.engine.begin() as conn:
                run = run_queries.get_run(conn, self.run_id)
                child = run_queries.get_child(conn, f"{self.run_id}.0")
                assert run is not None and child is not None
                item_queries.write_page(conn, run, child, offset, page[: limit - 1])
        return page


async def test_an_ingest_racing_an_earlier_attempt_stores_each_row_once(engine: Engine) -> None:
    racing = _EarlierAttempt(engine)
    run_id, cid = await ingesting_child(engine, racing, items=20)
    racing.run_id = run_id
    child = get_child(engine, cid)
    assert child.dataset_id is not None
    result = await ActivityEnvironment().run(
        IngestActivities(deps(engine, racing)).ingest_dataset,
        IngestInput(child_id=cid, dataset_id=child.dataset_id),
    )
    assert result.items == 20
    assert stored_indexes(engine, cid) == list(range(20))
    with engine.connect() as conn:
        pages = [
            e for e in event_queries.list_events(conn, run_id) if e.kind == "child.ingest_page"
        ]
    # Each page read is recorded once, the one the other attempt stored included.
    assert [e.data["offset"] for e in pages if e.data] == [7, 14, 20]
    assert get_child(engine, cid).items_ingested == 20


async def test_an_ingest_of_a_finished_child_reads_nothing(engine: Engine) -> None:
    platform = FakePlatform()
    _, cid = await ingesting_child(engine, platform, items=3)
    child = get_child(engine, cid)
    assert child.dataset_id is not None
    ingest = IngestActivities(deps(engine, platform)).ingest_dataset
    params = IngestInput(child_id=cid, dataset_id=child.dataset_id)
    assert (await ActivityEnvironment().run(ingest, params)).items == 3
    calls = platform.page_calls
    again = await ActivityEnvironment().run(ingest, params)
    assert again.items == 3 and platform.page_calls == calls


async def test_an_ingest_of_kept_rows_ends_the_child_in_its_final_state(engine: Engine) -> None:
    platform = FakePlatform()
    run_id, cid = await ingesting_child(engine, platform, items=9)
    child = get_child(engine, cid)
    assert child.dataset_id is not None
    result = await ActivityEnvironment().run(
        IngestActivities(deps(engine, platform)).ingest_dataset,
        IngestInput(
            child_id=cid,
            dataset_id=child.dataset_id,
            final_state="aborted",
            final_message="aborted by the caller",
        ),
    )
    assert result.items == 9
    ended = get_child(engine, cid)
    assert ended.state is ChildState.ABORTED and ended.items_ingested == 9 and ended.partial
    assert ended.status_message == "aborted by the caller"
    with engine.connect() as conn:
        run = run_queries.get_run(conn, run_id)
    assert run is not None and run.items_total == 9


async def test_an_outcome_is_recorded_and_the_header_finalised(engine: Engine) -> None:
    run_id, (first, second) = store_request(engine, {}, {})
    records = RecordActivities(deps(engine, FakePlatform()))
    env = ActivityEnvironment()
    await env.run(
        records.record_child_outcome,
        ChildOutcomeInput(child_id=first, state="failed", message="could not start"),
    )
    failed = get_child(engine, first)
    assert failed.state is ChildState.FAILED and failed.status_message == "could not start"
    live = await env.run(records.finalize_run, FinalizeInput(run_id=run_id))
    assert not live.terminal and not live.deliver_callback
    await env.run(
        records.record_child_outcome,
        ChildOutcomeInput(child_id=second, state="timed_out", message="past the cap"),
    )
    final = await env.run(records.finalize_run, FinalizeInput(run_id=run_id))
    assert final.terminal and final.state == RunState.TIMED_OUT.value
    assert not final.deliver_callback  # the request has no callback URL
