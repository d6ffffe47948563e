"""Rows pushed to the callback: the request's choice and how rows are cut into batches (pure).

A request with ``deliver.rows = "callback"`` has each child's rows POSTed to its callback URL
as NDJSON batches, in item-index order, as the child ends. This module owns the one rule that
decides a batch's extent: rows are taken in order while the batch stays within both caps
(``max_rows`` rows and ``max_bytes`` bytes of NDJSON, newline included); a batch always
holds at least one row, so a single row larger than the byte cap goes alone instead of
blocking the push. Trade-off: the cut is made from the encoded sizes only, so the caller can
measure rows as it reads them and stop reading once a batch is full.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

DELIVER_ROWS_NONE: Final = "none"
DELIVER_ROWS_CALLBACK: Final = "callback"

#: A child's push is under way (batches left), finished (every row acknowledged), or was
#: given up at ``failed_seq`` (the receiver refused a batch or never answered it).
PUSH_SENDING: Final = "sending"
PUSH_DONE: Final = "done"
PUSH_FAILED: Final = "failed"


@dataclass(frozen=True)
class BatchLimits:
    max_rows: int
    max_bytes: int

    def __post_init__(self) -> None:
        if self.max_rows < 1 or self.max_bytes < 1:
            raise ValueError("batch limits must be positive")


def fits(count: int, size: int, line: int, limits: BatchLimits) -> bool:
    """Whether a row whose NDJSON line is ``line`` bytes joins a batch of ``count`` rows and
    ``size`` bytes: always into an empty batch, else only within both caps."""
    return count == 0 or (count < limits.max_rows and size + line <= limits.max_bytes)


def batch_length(line_sizes: Iterable[int], limits: BatchLimits) -> int:
    """How many of the next rows (their NDJSON line sizes in bytes, newline included) form
    one batch: as many as fit both caps, and at least one when any row is left."""
    count = 0
    size = 0
    for line in line_sizes:
        if not fits(count, size, line, limits):
            break
        count += 1
        size += line
    return count


def cut_batches(line_sizes: Iterable[int], limits: BatchLimits) -> list[int]:
    """Every batch's length for rows of these sizes, in order (for tests and docs)."""
    sizes = list(line_sizes)
    lengths: list[int] = []
    start = 0
    while start < len(sizes):
        n = batch_length(sizes[start:], limits)
        lengths.append(n)
        start += n
    return lengths
