"""The byte-capped row pages of the MCP ``get_items`` tool (pure logic)."""

from __future__ import annotations

import json

from orchestrator.db.queries.item_pages import ChildSlice, ItemRow
from orchestrator.mcp import paging


def row(child: str, index: int, payload: str = "x") -> ItemRow:
    return ItemRow(
        id=index,
        run_id="run_1",
        child_id=child,
        item_index=index,
        workspace_id="ws",
        skill_run_id=None,
        conversation_id=None,
        actor="a",
        data=json.dumps({"i": index, "payload": payload, "keep": True}),
    )


def test_a_page_stops_before_the_row_that_would_pass_the_byte_cap() -> None:
    rows = [row("c0", i, "p" * 100) for i in range(100)]
    one = paging.json_size(paging.row_view(rows[0], None))
    cap = paging.PAGE_OVERHEAD_BYTES + 10 * one + 9  # exactly ten rows and their commas
    page = paging.take_rows(rows, max_bytes=cap)
    assert len(page.rows) == 10
    assert page.truncated_by_bytes
    assert page.bytes == paging.json_size(page.rows) - 2  # the rows without the brackets
    assert page.bytes <= cap - paging.PAGE_OVERHEAD_BYTES
    assert page.taken == {"c0": 10}


def test_a_page_under_the_cap_takes_every_row_it_is_given() -> None:
    page = paging.take_rows([row("c0", i) for i in range(5)], max_bytes=50_000)
    assert [r["itemIndex"] for r in page.rows] == [0, 1, 2, 3, 4]
    assert not page.truncated_by_bytes


def test_a_row_larger_than_the_cap_still_comes_alone() -> None:
    rows = [row("c0", 0, "p" * 5000), row("c0", 1)]
    page = paging.take_rows(rows, max_bytes=2000)
    assert [r["itemIndex"] for r in page.rows] == [0]
    assert page.truncated_by_bytes


def test_fields_keep_only_the_named_top_level_fields() -> None:
    page = paging.take_rows([row("c0", 0)], max_bytes=50_000, fields=["i", "missing"])
    assert page.rows[0]["data"] == {"i": 0}
    assert paging.select_fields([1, 2], ["i"]) == [1, 2]  # not an object: kept whole
    assert paging.select_fields({"a": 1}, None) == {"a": 1}


def test_the_cursor_advances_each_child_only_by_the_rows_taken() -> None:
    slices = [
        ChildSlice(child_id="c0", idx=0, start=3, count=4),
        ChildSlice(child_id="c1", idx=1, start=0, count=5),
    ]
    planned = {0: 7, 1: 5, 2: 0}
    # The cap cut the page two rows into the second child.
    after = paging.next_offsets(planned, slices, {"c0": 4, "c1": 2})
    assert after == {0: 7, 1: 2, 2: 0}
    assert paging.remaining_rows({0: 7, 1: 9, 2: 1}, after) == 0 + 7 + 1


def test_remaining_bytes_are_estimated_at_the_pages_average() -> None:
    page = paging.take_rows([row("c0", i) for i in range(4)], max_bytes=50_000)
    assert paging.estimate_bytes(8, page) == round(8 * page.bytes / 4)
    assert paging.estimate_bytes(8, paging.TakenPage()) == 0
