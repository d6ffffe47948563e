"""The wire form of a batch of rows pushed to a callback (pure: no I/O, no clock).

Owns what a receiver of ``deliver.rows = "callback"`` sees besides the Standard Webhooks
headers: the NDJSON body (one row per line in the item shape of ``GET /runs/{id}/items``,
each line ending in a newline), the ``webhook-id`` of a batch and the ``X-Orchestrator-*``
headers that say which batch it is.

The ``webhook-id`` is ``rows_<child id with "." as "_">_<seq>``: derived, so every retry of
a batch (even after a worker crash) carries the same id, and covered by the signature, so a
receiver can trust the child and the sequence number it reads from it. The headers repeat
them in plain form for convenience; they are not signed, the rows' own ``childId`` and
``itemIndex`` in the body are. Trade-off: a batch's body is built in memory (at most the byte
cap plus one row), which keeps the signature over exact bytes simple.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

NDJSON_MEDIA_TYPE: Final = "application/x-ndjson"

HEADER_RUN_ID: Final = "x-orchestrator-run-id"
HEADER_CHILD_ID: Final = "x-orchestrator-child-id"
HEADER_SEQ: Final = "x-orchestrator-batch-seq"
HEADER_LAST: Final = "x-orchestrator-batch-last"
HEADER_ROWS: Final = "x-orchestrator-batch-rows"
HEADER_FIRST_INDEX: Final = "x-orchestrator-first-item-index"
HEADER_LAST_INDEX: Final = "x-orchestrator-last-item-index"
HEADER_ROWS_TOTAL: Final = "x-orchestrator-child-rows-total"


def row_batch_message_id(child_id: str, seq: int) -> str:
    """The ``webhook-id`` of batch ``seq`` (1-based) of ``child_id``'s rows."""
    if seq < 1:
        raise ValueError("batch sequence numbers start at 1")
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in child_id)
    return f"rows_{safe}_{seq}"


@dataclass(frozen=True)
class BatchInfo:
    """Which batch a body is: its child, 1-based sequence number and item index range."""

    run_id: str
    child_id: str
    seq: int
    first_index: int
    last_index: int
    rows: int
    rows_total: int
    #: No rows of this child come after this batch.
    last: bool


def encode_lines(lines: Iterable[str]) -> bytes:
    """The NDJSON body: each row's JSON on its own line, each line ending in a newline."""
    return "".join(f"{line}\n" for line in lines).encode("utf-8")


def batch_headers(info: BatchInfo) -> dict[str, str]:
    """The ``X-Orchestrator-*`` headers and content type of a batch (signing adds the rest)."""
    return {
        "content-type": NDJSON_MEDIA_TYPE,
        HEADER_RUN_ID: info.run_id,
        HEADER_CHILD_ID: info.child_id,
        HEADER_SEQ: str(info.seq),
        HEADER_LAST: "true" if info.last else "false",
        HEADER_ROWS: str(info.rows),
        HEADER_FIRST_INDEX: str(info.first_index),
        HEADER_LAST_INDEX: str(info.last_index),
        HEADER_ROWS_TOTAL: str(info.rows_total),
    }
