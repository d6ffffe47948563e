"""A page stores every item exactly as it came, whatever characters it holds: fresh pages
(COPY straight in on PostgreSQL) and retried ones (merged through a staging table)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import psycopg
import pytest
from sqlalchemy import Engine, select

from orchestrator.db.engine import build_engine, migrate
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
        item_queries.write_page(conn, run, child, 0, AWKWARD[:3])
    with engine.begin() as conn:
        # A retried, overlapping page: the merge path (a staging table on PostgreSQL).
        item_queries.write_page(conn, run, child, 1, AWKWARD[1:])
    assert _stored(engine, child.id) == [
        (n, item, "ws\ttab", "skill\\1") for n, item in enumerate(AWKWARD)
    ]


def test_an_item_with_a_newline_of_its_own_is_kept_whole(engine: Engine) -> None:
    """Items are JSON Lines, but a stored document with a newline must not split a row."""
    run, child = _run(engine, skill=None)
    items = ['{"a":\n1}', '{"b": "\\\\"}', "{\r\n}"]
    with engine.begin() as conn:
        item_queries.write_page(conn, run, child, 0, items)
    assert _stored(engine, child.id) == [(n, item, "ws\ttab", None) for n, item in enumerate(items)]


# Pages written behind one another (PostgreSQL): the COPYs overlap, the cursor moves in order.


@pytest.fixture
def pg_engine(postgres_url: str) -> Iterator[Engine]:
    eng = build_engine(postgres_url)
    migrate(eng)
    yield eng
    eng.dispose()


def _cursor(engine: Engine, cid: str) -> int:
    with engine.connect() as conn:
        child = run_queries.get_child(conn, cid)
    assert child is not None
    return child.ingest_offset


def _page(start: int, count: int) -> list[str]:
    return [json.dumps({"n": n}) for n in range(start, start + count)]


class _ObservedTurn(item_queries.PageTurn):
    """Says when its page has copied its rows and waits for the page before."""

    def __init__(self, before: item_queries.PageTurn | None) -> None:
        super().__init__(before)
        self.waiting = threading.Event()

    def wait_for_the_page_before(self) -> None:
        self.waiting.set()
        super().wait_for_the_page_before()


def _write_in_thread(
    engine: Engine,
    run: run_queries.RunRecord,
    child: run_queries.ChildRecord,
    offset: int,
    items: list[str],
    turn: item_queries.PageTurn,
) -> Future[None]:
    def write() -> None:
        with engine.begin() as conn:
            item_queries.write_page(conn, run, child, offset, items, turn)

    return ThreadPoolExecutor(1).submit(write)


@pytest.mark.postgres
def test_a_page_behind_is_copied_before_the_page_before_commits(pg_engine: Engine) -> None:
    run, child = _run(pg_engine, skill=None)
    first = item_queries.PageTurn(None)
    second = _ObservedTurn(first)
    behind = _write_in_thread(pg_engine, run, child, 3, _page(3, 2), second)
    # Its rows are copied (not yet visible) while it waits for the page before.
    assert second.waiting.wait(10) and not behind.done()
    assert _stored(pg_engine, child.id) == []
    with pg_engine.begin() as conn:
        item_queries.write_page(conn, run, child, 0, _page(0, 3), first)
    behind.result(timeout=10)
    assert [row[1] for row in _stored(pg_engine, child.id)] == _page(0, 5)
    assert _cursor(pg_engine, child.id) == 5


@pytest.mark.postgres
def test_a_page_behind_one_that_failed_rolls_back(pg_engine: Engine) -> None:
    run, child = _run(pg_engine, skill=None)
    first = item_queries.PageTurn(None)
    behind = _write_in_thread(pg_engine, run, child, 3, _page(3, 2), item_queries.PageTurn(first))
    first.failed()
    with pytest.raises(item_queries.CursorMoved):
        behind.result(timeout=10)
    assert _stored(pg_engine, child.id) == [] and _cursor(pg_engine, child.id) == 0


@pytest.mark.postgres
def test_a_page_behind_rolls_back_when_the_cursor_is_not_where_it_begins(
    pg_engine: Engine,
) -> None:
    """The page before it reached the cursor but did not commit (or another attempt moved
    it): the page behind must not leave a gap."""
    run, child = _run(pg_engine, skill=None)
    first = item_queries.PageTurn(None)
    first.reached()  # and then rolled back: the cursor stays at 0
    behind = _write_in_thread(pg_engine, run, child, 3, _page(3, 2), item_queries.PageTurn(first))
    with pytest.raises(item_queries.CursorMoved, match="at 0, page at 3"):
        behind.result(timeout=10)
    assert _stored(pg_engine, child.id) == [] and _cursor(pg_engine, child.id) == 0


@pytest.mark.postgres
def test_a_page_behind_never_stores_a_row_another_attempt_stored(pg_engine: Engine) -> None:
    run, child = _run(pg_engine, skill=None)
    with pg_engine.begin() as conn:  # another attempt got further: rows 0..4 and the cursor
        item_queries.write_page(conn, run, child, 0, _page(0, 5))
    first = item_queries.PageTurn(None)
    first.reached()
    behind = _write_in_thread(pg_engine, run, child, 3, _page(3, 2), item_queries.PageTurn(first))
    with pytest.raises(psycopg.errors.UniqueViolation):  # rows 3 and 4 exist
        behind.result(timeout=10)
    assert [row[1] for row in _stored(pg_engine, child.id)] == _page(0, 5)
    assert _cursor(pg_engine, child.id) == 5
