"""Storage on SQLite and PostgreSQL: migrations, requests, transitions, idempotent rows."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy import Engine, delete, inspect, select

from orchestrator.config.bootstrap import bundled_registry_text
from orchestrator.db.engine import migrate
from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries import item_pages, registry
from orchestrator.db.queries import items as item_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.schema import metadata, scrape_items, shared_config
from orchestrator.domain.ids import child_id, new_run_id
from orchestrator.domain.lifecycle import ChildState, RunState
from tests.support.db import count_items


def make_run(engine: Engine, children: int = 2) -> str:
    run_id = new_run_id()
    run = run_queries.NewRun(
        id=run_id,
        workspace_id="ws_1",
        conversation_id="conv_1",
        skill_run_id="skill_1",
        callback_url=None,
        children=tuple(
            run_queries.NewChild(
                id=child_id(run_id, i),
                idx=i,
                actor="ultron-leadgen",
                platform_actor_id="ultron~leadgen",
                input={"brief": "x"},
                options={"memoryMb": 1024},
            )
            for i in range(children)
        ),
    )
    with engine.begin() as conn:
        run_queries.insert_run(conn, run)
    return run_id


def test_migrations_create_the_schema_and_are_idempotent(engine: Engine) -> None:
    migrate(engine)  # a second time changes nothing
    tables = set(inspect(engine).get_table_names())
    assert set(metadata.tables) <= tables
    assert "alembic_version" in tables
    for name, table in metadata.tables.items():
        columns = {c["name"] for c in inspect(engine).get_columns(name)}
        assert columns == {c.name for c in table.columns}, name
        # Indexes too: one the schema no longer declares must be gone from a migrated database.
        indexes = {i["name"] for i in inspect(engine).get_indexes(name)} - {
            c["name"] for c in inspect(engine).get_unique_constraints(name)
        }
        assert indexes == {i.name for i in table.indexes}, name


def test_request_lifecycle_and_roll_up(engine: Engine) -> None:
    run_id = make_run(engine)
    first, second = child_id(run_id, 0), child_id(run_id, 1)
    with engine.begin() as conn:
        run = run_queries.get_run(conn, run_id)
        assert run is not None and run.state is RunState.QUEUED
        assert run_queries.transition_child(conn, first, ChildState.SPAWNING)
        assert run_queries.get_run(conn, run_id).state is RunState.SPAWNING  # type: ignore[union-attr]
        run_queries.transition_child(
            conn, first, ChildState.RUNNING, platform_run_id="P1", dataset_id="D1"
        )
        run_queries.transition_child(conn, second, ChildState.RUNNING)
        assert run_queries.get_run(conn, run_id).state is RunState.RUNNING  # type: ignore[union-attr]
        # A repeated or stale transition is refused and changes nothing.
        assert not run_queries.transition_child(conn, first, ChildState.RUNNING)
        assert not run_queries.transition_child(conn, first, ChildState.SPAWNING)
        run_queries.transition_child(conn, second, ChildState.FAILED, status_message="boom")
        assert run_queries.get_run(conn, run_id).state is RunState.PARTIAL  # type: ignore[union-attr]
        run_queries.transition_child(conn, first, ChildState.SUCCEEDED)
        final = run_queries.get_run(conn, run_id)
        assert final is not None
        # Every child has ended: partial is now the final state.
        assert final.state is RunState.PARTIAL and final.terminal and final.finished_at
        child = run_queries.get_child(conn, first)
        assert child is not None and child.platform_run_id == "P1" and child.dataset_id == "D1"
        kinds = [e.kind for e in event_queries.list_events(conn, run_id)]
    assert kinds.count("child.state") == 5
    assert "run.created" in kinds and "run.state" in kinds


def test_all_succeeded_is_terminal_with_finish_time(engine: Engine) -> None:
    run_id = make_run(engine, children=1)
    with engine.begin() as conn:
        run_queries.transition_child(conn, child_id(run_id, 0), ChildState.SUCCEEDED)
        run = run_queries.get_run(conn, run_id)
    assert run is not None and run.state is RunState.SUCCEEDED and run.terminal
    assert run.finished_at is not None


def test_pages_are_written_once_whatever_the_retries(engine: Engine) -> None:
    run_id = make_run(engine, children=1)
    cid = child_id(run_id, 0)
    page = [json.dumps({"n": i}).encode() for i in range(250)]
    with engine.begin() as conn:
        run = run_queries.get_run(conn, run_id)
        child = run_queries.get_child(conn, cid)
        assert run and child
        item_queries.write_page(conn, run, child, 0, page)
        item_queries.write_page(conn, run, child, 0, page)  # a retried page
        item_queries.write_page(conn, run, child, 100, page[100:])  # an overlapping resume
        item_queries.write_page(conn, run, child, 250, [])
    with engine.connect() as conn:
        assert count_items(conn, run_id) == 250
        indexes = (
            conn.execute(select(scrape_items.c.item_index).where(scrape_items.c.run_id == run_id))
            .scalars()
            .all()
        )
        assert sorted(indexes) == list(range(250))
        child = run_queries.get_child(conn, cid)
        assert child is not None and child.ingest_offset == 250 and child.items_ingested == 250
        # Read back the way the API pages them: a plan per page, then the rows streamed.
        page_one = item_pages.plan_page(conn, run_id, {}, limit=100)
        page_two = item_pages.plan_page(conn, run_id, page_one.next_offsets, limit=1000)
    assert page_one.more_stored and not page_two.more_stored
    first = list(item_pages.stream_rows(engine, page_one, chunk=30))
    rest = list(item_pages.stream_rows(engine, page_two))
    assert [json.loads(i.data)["n"] for i in first + rest] == list(range(250))
    assert first[0].actor == "ultron-leadgen"


def test_registry_seed_does_not_overwrite_operator_edits(engine: Engine) -> None:
    # Names of this test's own: the PostgreSQL database (and its registry) is the session's.
    suffix = uuid.uuid4().hex[:8]
    bundled = registry.load_registry_file(bundled_registry_text())
    entries = {f"{name}-{suffix}": entry for name, entry in bundled.items()}
    leadgen = f"ultron-leadgen-{suffix}"
    with engine.begin() as conn:
        assert registry.seed_registry(conn, entries) == len(entries)
        registry.put_actor(conn, leadgen, registry.ActorEntry(platform_actor_id="someone~else"))
        assert registry.seed_registry(conn, entries) == 0
        actors = registry.list_actors(conn)
        assert actors[leadgen].platform_actor_id == "someone~else"
        assert f"ultron-similarweb-bulk-{suffix}" in actors and "nope" not in actors
        conn.execute(delete(shared_config).where(shared_config.c.key.endswith(f"-{suffix}")))


def test_event_dedupe_keys(engine: Engine) -> None:
    run_id = make_run(engine, children=1)
    with engine.begin() as conn:
        assert event_queries.append_event(conn, run_id, "x", "once", dedupe_key="k1")
        assert not event_queries.append_event(conn, run_id, "x", "twice", dedupe_key="k1")
        assert event_queries.append_event(conn, run_id, "poll", "attempts repeat")
        assert event_queries.append_event(conn, run_id, "poll", "attempts repeat")
        kinds = [e.kind for e in event_queries.list_events(conn, run_id)]
    assert kinds.count("x") == 1 and kinds.count("poll") == 2


def test_events_appended_together_keep_their_order(engine: Engine) -> None:
    run_id = make_run(engine, children=1)
    child = child_id(run_id, 0)
    batch = [
        event_queries.NewEvent("child.ingest_page", f"page {n}", child, {"offset": n * 10})
        for n in range(1, 4)
    ]
    with engine.begin() as conn:
        event_queries.append_event(conn, run_id, "before", "first")
        event_queries.append_events(conn, run_id, batch)
        event_queries.append_events(conn, run_id, [])
        logged = event_queries.list_events(conn, run_id)
    stored = logged[[e.kind for e in logged].index("before") :]
    assert [(e.kind, e.message) for e in stored] == [("before", "first")] + [
        (e.kind, e.message) for e in batch
    ]
    assert [e.data for e in stored[1:]] == [{"offset": 10}, {"offset": 20}, {"offset": 30}]
    assert {e.child_id for e in stored[1:]} == {child}
    assert [e.id for e in stored] == sorted(e.id for e in stored)


@pytest.mark.parametrize("bad", ['{"actors": []}', "[]"])
def test_registry_file_must_map_names(bad: str) -> None:
    with pytest.raises(ValueError):
        registry.load_registry_file(bad)


@pytest.mark.postgres
def test_event_appends_for_a_request_are_serialised_until_commit(postgres_url: str) -> None:
    """On PostgreSQL ids come from a sequence at insert time; holding the request's lock to
    commit makes a request's event ids visible in order, so a cursor never skips one."""
    from sqlalchemy import text

    from orchestrator.db.engine import build_engine
    from orchestrator.db.queries.events import EVENT_LOCK_NAMESPACE, _lock_key

    eng = build_engine(postgres_url)
    migrate(eng)
    run_id = make_run(eng, children=1)
    other_run = make_run(eng, children=1)
    probe = {"ns": EVENT_LOCK_NAMESPACE, "key": _lock_key(run_id)}
    try:
        with eng.connect() as first, eng.connect() as second:
            with first.begin():
                event_queries.append_event(first, run_id, "x", "appended, not committed")
                with second.begin():
                    taken = second.execute(
                        text("SELECT pg_try_advisory_xact_lock(:ns, :key)"), probe
                    ).scalar_one()
                    assert taken is False, "a second writer could append before the first commits"
                    # Another request's events are not held up.
                    assert event_queries.append_event(second, other_run, "y", "independent")
            with first.begin():
                # A batch of events takes the same lock.
                event_queries.append_events(first, run_id, [event_queries.NewEvent("z", "b")])
                with second.begin():
                    taken = second.execute(
                        text("SELECT pg_try_advisory_xact_lock(:ns, :key)"), probe
                    ).scalar_one()
                    assert taken is False, "a batch was appended without the request's lock"
            with second.begin():
                assert (
                    second.execute(
                        text("SELECT pg_try_advisory_xact_lock(:ns, :key)"), probe
                    ).scalar_one()
                    is True
                )
    finally:
        eng.dispose()
