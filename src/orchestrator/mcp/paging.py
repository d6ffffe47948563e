"""Pages of rows sized for a model's context: capped by row count and by JSON bytes.

A page is planned by count (``db.queries.item_pages.plan_page``, the same per-child cursor
as ``GET /runs/{id}/items``), then rows are taken in order until the next one would push
the page's JSON past the byte cap. The cursor then points just after the last row taken,
child by child, so no row is skipped or repeated however the cap cuts. A single row larger
than the cap still comes alone (a page always makes progress), flagged ``truncatedByBytes``
so the caller can narrow it with ``fields``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.db.queries.item_pages import ChildSlice, ItemRow

#: Bytes of the page's own JSON around its rows (keys, counts, the cursor), kept in reserve.
PAGE_OVERHEAD_BYTES = 1024


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON (the measure every cap uses)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def select_fields(data: Any, fields: Sequence[str] | None) -> Any:
    """The row's top-level ``fields`` only (missing ones are left out); all of it without."""
    if not fields or not isinstance(data, dict):
        return data
    return {name: data[name] for name in fields if name in data}


def row_view(row: ItemRow, fields: Sequence[str] | None) -> dict[str, Any]:
    """A row as a tool returns it: where it came from, and its (selected) data."""
    return {
        "actor": row.actor,
        "childId": row.child_id,
        "itemIndex": row.item_index,
        "data": select_fields(json.loads(row.data), fields),
    }


@dataclass
class TakenPage:
    rows: list[dict[str, Any]] = field(default_factory=list)
    #: Bytes of the rows as JSON (with the commas between them).
    bytes: int = 0
    #: Rows taken from each child (by child id).
    taken: dict[str, int] = field(default_factory=dict)
    #: True when the byte cap, not the row limit, ended the page.
    truncated_by_bytes: bool = False


def take_rows(
    rows: Iterable[ItemRow],
    *,
    max_bytes: int,
    fields: Sequence[str] | None = None,
) -> TakenPage:
    """Rows in order until the next would take the page past ``max_bytes`` (at least one)."""
    page = TakenPage()
    budget = max(0, max_bytes - PAGE_OVERHEAD_BYTES)
    for row in rows:
        view = row_view(row, fields)
        size = json_size(view) + (1 if page.rows else 0)
        if page.rows and page.bytes + size > budget:
            page.truncated_by_bytes = True
            break
        page.rows.append(view)
        page.bytes += size
        page.taken[row.child_id] = page.taken.get(row.child_id, 0) + 1
        if page.bytes > budget:
            # A single row above the cap: it comes alone.
            page.truncated_by_bytes = True
            break
    return page


def next_offsets(
    planned: Mapping[int, int], slices: Sequence[ChildSlice], taken: Mapping[str, int]
) -> dict[int, int]:
    """The cursor after a page: each planned slice advanced only by the rows really taken."""
    offsets = dict(planned)
    for part in slices:
        offsets[part.idx] = part.start + taken.get(part.child_id, 0)
    return offsets


def remaining_rows(stored: Mapping[int, int], offsets: Mapping[int, int]) -> int:
    """Rows stored (per child index) beyond the cursor."""
    return sum(max(0, count - offsets.get(idx, 0)) for idx, count in stored.items())


def estimate_bytes(remaining: int, page: TakenPage) -> int:
    """What the remaining rows weigh, at this page's average row size."""
    if not page.rows:
        return 0
    return round(remaining * page.bytes / len(page.rows))
