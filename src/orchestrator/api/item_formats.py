"""Rendering item rows as JSON, NDJSON or CSV, as a stream of text chunks.

Rows arrive from ``item_pages.stream_rows`` one at a time and leave in chunks of about
64 KiB, so memory stays flat whatever the page size. An item's payload is spliced in as the
JSON text it was stored as (never parsed and re-encoded) for JSON and NDJSON. CSV needs its
columns before the first row: the routing columns, then ``data.<key>`` for each top-level
key of the page's items in first-seen order, found by a first pass over the same rows
(non-object items go to a ``data`` column; nested values are JSON-encoded).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from typing import Any

from orchestrator.db.queries.item_pages import ItemRow, item_json

CHUNK_CHARS = 64 * 1024


class ItemFormat(StrEnum):
    JSON = "json"
    NDJSON = "ndjson"
    CSV = "csv"


MEDIA_TYPES = {
    ItemFormat.JSON: "application/json",
    ItemFormat.NDJSON: "application/x-ndjson",
    ItemFormat.CSV: "text/csv; charset=utf-8",
}

ROUTING_COLUMNS = (
    "id",
    "runId",
    "childId",
    "itemIndex",
    "workspaceId",
    "skillId",
    "conversationId",
    "actor",
)


def negotiate(accept: str | None) -> ItemFormat:
    """The format an ``Accept`` header asks for (JSON unless NDJSON or CSV is named)."""
    accept = (accept or "").lower()
    if "application/x-ndjson" in accept or "application/ndjson" in accept:
        return ItemFormat.NDJSON
    if "text/csv" in accept:
        return ItemFormat.CSV
    return ItemFormat.JSON


def _item_json(row: ItemRow) -> str:
    return item_json(row)


def _chunked(parts: Iterable[str]) -> Iterator[str]:
    buffer: list[str] = []
    size = 0
    for part in parts:
        buffer.append(part)
        size += len(part)
        if size >= CHUNK_CHARS:
            yield "".join(buffer)
            buffer, size = [], 0
    if buffer:
        yield "".join(buffer)


def render_json(rows: Iterable[ItemRow], next_cursor: str | None) -> Iterator[str]:
    def parts() -> Iterator[str]:
        yield '{"nextCursor":' + json.dumps(next_cursor) + ',"items":['
        for n, row in enumerate(rows):
            yield ("," if n else "") + _item_json(row)
        yield "]}"

    return _chunked(parts())


def render_ndjson(rows: Iterable[ItemRow]) -> Iterator[str]:
    return _chunked(_item_json(row) + "\n" for row in rows)


# A spreadsheet runs a cell that starts with one of these as a formula; scraped text is
# untrusted, so such a cell is prefixed with an apostrophe (OWASP "CSV injection").
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> str:
    """One CSV cell: scalars as text, anything else as compact JSON, formulas defused."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    text = (
        value
        if isinstance(value, str)
        else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    )
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def render_csv(rows: Callable[[], Iterable[ItemRow]]) -> Iterator[str]:
    """CSV of the rows ``rows()`` yields; it is called twice (columns, then values)."""
    keys: dict[str, None] = {}
    scalar_data = False
    for row in rows():
        data = json.loads(row.data)
        if isinstance(data, dict):
            keys.update(dict.fromkeys(data))
        else:
            scalar_data = True
    data_columns = [f"data.{k}" for k in keys] + (["data"] if scalar_data else [])

    def parts() -> Iterator[str]:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\r\n")
        writer.writerow([*ROUTING_COLUMNS, *data_columns])
        for row in rows():
            data = json.loads(row.data)
            values = [
                row.id,
                row.run_id,
                row.child_id,
                row.item_index,
                row.workspace_id,
                row.skill_run_id,
                row.conversation_id,
                row.actor,
            ]
            if isinstance(data, dict):
                values += [data.get(k) for k in keys] + ([None] if scalar_data else [])
            else:
                values += [None] * len(keys) + [data]
            writer.writerow([csv_cell(v) for v in values])
            yield out.getvalue()
            out.seek(0)
            out.truncate()
        yield out.getvalue()

    return _chunked(parts())
