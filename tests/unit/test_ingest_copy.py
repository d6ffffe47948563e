"""A page stores every item exactly as it came, whatever characters it holds: fresh pages
(COPY straight in on PostgreSQL) and retried ones (merged through a staging table)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from sqlalchemy import Connection, Engine, select

from orchestrator.db.engine import build_engine
from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries import items as item_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.schema import scrape_items
from orchestrator.domain.ids import child_id, new_run_id

AWKWARD = [
    json.dumps({"quote": 'say "hi"', "slash": "a\\b", "nl": "x\ny", "tab": "\t"}),
    json.dumps({"unicode": "héllo ☃ 𝄞", "nul": "\u0000"}, ensure_ascii=False),
    '{"raw tab":\t1,\r"cr": 2}',  # JSON whitespace may be a tab or a carriage return
    "\\N",  # what COPY reads as NULL if it were not escaped
    '{"backslash at the end": "\\\\"}',
    "{}",
]


def _run(
    engine: Engine, *, skill: str | None
) -> tuple[run_queries.RunRecord, run_queries.ChildRecord]:
    run_id = new_run_id()
    new = run_queries.NewRun(
        id=run_id,
        workspace_id="ws\ttab",
        conversation_id=None,
        skill_run_id=skill,
        callback_url=None,
        children=(
            run_queries.NewChild(
                id=child_id(run_id, 0),
                idx=0,
                actor="ultron-generator",
                platform_actor_id="ultron~generator",
                input={},
                options={},
            ),
        ),
    )
    with engine.begin() as conn:
        run_queries.insert_run(conn, new)
        run = run_queries.get_run(conn, run_id)
        child = run_queries.get_child(conn, child_id(run_id, 0))
    assert run is not None and child is not None
    return run, child


def _bytes(items: list[str]) -> list[bytes]:
    return [item.encode() for item in items]


def _stored(engine: Engine, cid: str) -> list[tuple[int, str, str, str | None]]:
    i = scrape_items.c
    with engine.connect() as conn:
        rows = conn.execute(
            select(i.item_index, i.data, i.workspace_id, i.skill_run_id)
            .where(i.child_id == cid)
            .order_by(i.item_index)
        ).all()
    return [(r.item_index, r.data, r.workspace_id, r.skill_run_id) for r in rows]


def test_awkward_items_are_stored_as_they_came(engine: Engine) -> None:
    run, child = _run(engine, skill="skill\\1")
    with engine.begin() as conn:
        item_queries.write_page(conn, run, child, 0, _bytes(AWKWARD[:3]))
    with engine.begin() as conn:
        # A retried, overlapping page: the merge path (a staging table on PostgreSQL).
        item_queries.write_page(conn, run, child, 1, _bytes(AWKWARD[1:]))
    assert _stored(engine, child.id) == [
        (n, item, "ws\ttab", "skill\\1") for n, item in enumerate(AWKWARD)
    ]


def test_an_item_with_a_newline_of_its_own_is_kept_whole(engine: Engine) -> None:
    """Items are JSON Lines, but a stored document with a newline must not split a row."""
    run, child = _run(engine, skill=None)
    items = ['{"a":\n1}', '{"b": "\\\\"}', "{\r\n}"]
    with engine.begin() as conn:
        item_queries.write_page(conn, run, child, 0, _bytes(items))
    assert _stored(engine, child.id) == [(n, item, "ws\ttab", None) for n, item in enumerate(items)]


@pytest.mark.postgres
def test_a_binary_copy_page_round_trips_every_column(postgres_url: str) -> None:
    """The hand-built COPY stream: NULLs, non-ASCII routing values, the timestamp to the
    microsecond and items as their bytes, read back exactly by PostgreSQL."""
    stamp = datetime(2026, 12, 2, 4, 5, 6, 789_012, tzinfo=UTC)
    tagging = ("run_ü", "run_ü.0", "ws\ttab", None, "conv\\1", "actor☃")
    page = item_queries.binary_copy_page(tagging, stamp, 41, _bytes(AWKWARD))
    engine = build_engine(postgres_url)
    try:
        with engine.begin() as conn:
            raw: Any = conn.connection.driver_connection
            with raw.cursor() as cursor:
                cursor.execute(item_queries.PG_STAGE)
                with cursor.copy(item_queries.PG_COPY_STAGE) as copy:
                    copy.write(page)
                cursor.execute(
                    "SELECT run_id, child_id, workspace_id, skill_run_id, conversation_id,"
                    " actor, created_at, item_index, data FROM scrape_items_stage"
                    " ORDER BY item_index"
                )
                rows = cursor.fetchall()
    finally:
        engine.dispose()
    assert rows == [(*tagging, stamp, 41 + n, item) for n, item in enumerate(AWKWARD)]


@pytest.mark.postgres
def test_an_item_that_is_not_utf8_stores_nothing_of_its_page(postgres_url: str) -> None:
    """Items go to PostgreSQL as the platform's bytes; PostgreSQL still refuses bytes that are
    not UTF-8 text, and the page's rows and cursor stay unwritten together."""
    engine = build_engine(postgres_url)
    try:
        run, child = _run(engine, skill=None)
        with pytest.raises(psycopg.errors.DataError), engine.begin() as conn:
            item_queries.write_page(conn, run, child, 0, [b'{"ok": 1}', b'{"bad": "\xff"}'])
        assert _stored(engine, child.id) == []
        with engine.connect() as conn:
            again = run_queries.get_child(conn, child.id)
        assert again is not None and again.ingest_offset == 0
    finally:
        engine.dispose()


def _page_events(conn: Connection, run_id: str) -> int:
    events = event_queries.list_events(conn, run_id)
    return sum(e.kind == "child.ingest_page" for e in events)


@pytest.mark.postgres
def test_a_new_page_another_attempt_stored_first_commits_nothing(postgres_url: str) -> None:
    """The fast path's two ways of finding another attempt's work: rows of the page already
    stored (the COPY fails on the unique key), or the cursor moved past the page's offset
    with the rows elsewhere (the compare-and-set misses). Either way nothing of it commits,
    not even its events, and the merge path then stores what is missing."""
    engine = build_engine(postgres_url)
    try:
        run, child = _run(engine, skill=None)
        page = _bytes([json.dumps({"n": n}) for n in range(6)])
        event = [event_queries.NewEvent("child.ingest_page", "page", child_id=child.id)]
        with engine.begin() as conn:  # the other attempt, first: items 0..3
            item_queries.write_page(conn, run, child, 0, page[:4])
        with pytest.raises(item_queries.StalePage), engine.begin() as conn:
            item_queries.store_new_page(conn, run, child, 0, page, event)
        with pytest.raises(item_queries.StalePage), engine.begin() as conn:
            # Items 6.. are new, but the cursor (4) is not at this page's offset (6).
            item_queries.store_new_page(conn, run, child, 6, _bytes(["{}"]), event)
        assert [n for n, *_ in _stored(engine, child.id)] == [0, 1, 2, 3]
        with engine.begin() as conn:
            assert _page_events(conn, run.id) == 0
            item_queries.store_page(conn, run, child, 0, page, event)
        with engine.connect() as conn:
            again = run_queries.get_child(conn, child.id)
            events = _page_events(conn, run.id)
        assert [n for n, *_ in _stored(engine, child.id)] == list(range(6))
        assert again is not None and again.ingest_offset == 6 and events == 1
    finally:
        engine.dispose()
