"""Activity ``push_row_batch``: one signed attempt to POST the next batch of a child's rows.

For a request with ``deliver.rows = "callback"``, each child's rows go to the callback URL
as NDJSON batches once the child is final (``workflows/row_delivery.py`` loops over this
activity). Each call sends one batch, and each activity attempt is one HTTP attempt, so
Temporal's retry policy (``policies.ROWS_RETRY``, the callback's schedule) is the retry loop
and a worker crash loses nothing. Every attempt:

* reads the child's cursor (``db/queries/row_deliveries``), opening it at batch 1 the first
  time (``rows_total`` = the rows the final child stored);
* plans batch ``next_seq`` once (rows from ``next_index`` in item order, within
  ``row_batch_max_rows`` / ``row_batch_max_bytes``, a huge row alone) and stores its end, or
  re-reads the batch already planned, so a retry sends the same rows under the same
  ``webhook-id``;
* signs the body afresh (new ``webhook-timestamp``, the workspace's current secrets) and
  sends it through ``CallbackSender`` (URL and resolved addresses checked again, no
  redirects);
* delivered → the cursor moves past the batch in the same transaction as the
  ``rows.batch_delivered`` event; retryable → a ``rows.batch_attempt`` event and an
  ``ApplicationError`` with ``next_retry_delay`` (the schedule's wait, or Retry-After if
  longer); permanent or out of attempts → the push of this child ends there
  (``rows.batch_failed``, cursor ``failed``) and a non-retryable error.

Trade-off: a batch delivered but not yet acknowledged when the worker dies is sent again
(same ``webhook-id`` and sequence number): receivers de-duplicate, and never see a gap.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection
from temporalio import activity
from temporalio.exceptions import ApplicationError

from orchestrator.activities.delivery import send_attempt
from orchestrator.activities.deps import ActivityDeps
from orchestrator.db.queries import events as event_queries
from orchestrator.db.queries import row_deliveries as cursor_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.queries.item_pages import READ_CHUNK, item_json, read_rows
from orchestrator.db.queries.row_deliveries import RowDelivery
from orchestrator.delivery.row_batches import (
    BatchInfo,
    batch_headers,
    encode_lines,
    row_batch_message_id,
)
from orchestrator.delivery.sender import DeliveryOutcome
from orchestrator.delivery.signing import signed_headers_for_all
from orchestrator.delivery.url_guard import url_for_log
from orchestrator.domain.row_push import DELIVER_ROWS_CALLBACK, BatchLimits, fits
from orchestrator.service.workspaces import signing_secrets
from orchestrator.workflows.policies import ERR_ROWS_PERMANENT
from orchestrator.workflows.types import PushRowsInput, PushRowsResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Batch:
    url: str
    info: BatchInfo
    body: bytes
    message_id: str
    secrets: list[str]


def _planned_lines(
    conn: Connection, cursor: RowDelivery, limits: BatchLimits
) -> tuple[list[str], list[int], int]:
    """The lines of the next batch from the cursor, their item indexes, and its end."""
    lines: list[str] = []
    indexes: list[int] = []
    size = 0
    position = cursor.next_index
    while position < cursor.rows_total:
        chunk = read_rows(
            conn,
            cursor.child_id,
            position,
            min(position + min(READ_CHUNK, limits.max_rows), cursor.rows_total),
        )
        if not chunk:  # rows below rows_total are stored; never expected
            break
        for row in chunk:
            line = item_json(row)
            length = len(line.encode("utf-8")) + 1
            if not fits(len(lines), size, length, limits):
                return lines, indexes, row.item_index
            lines.append(line)
            indexes.append(row.item_index)
            size += length
        position = chunk[-1].item_index + 1
    return lines, indexes, position


class RowDeliveryActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self._deps = deps

    def _limits(self) -> BatchLimits:
        config = self._deps.config
        return BatchLimits(max_rows=config.row_batch_max_rows, max_bytes=config.row_batch_max_bytes)

    def _prepare(
        self, conn: Connection, child_id: str, now: datetime
    ) -> _Batch | RowDelivery | None:
        """The batch to send now, or the cursor when nothing is left (None: no push)."""
        found = run_queries.get_child_and_run(conn, child_id)
        if found is None:
            return None
        child, run = found
        if not child.state.terminal:
            return None
        if run.deliver_rows != DELIVER_ROWS_CALLBACK or not run.callback_url:
            return None
        cursor = cursor_queries.open_delivery(conn, run.id, child_id, child.ingest_offset)
        if not cursor.sending:
            return cursor
        if cursor.pending_end is None:
            lines, indexes, end = _planned_lines(conn, cursor, self._limits())
            if not lines:  # the stored rows end early (never expected): nothing to send
                cursor_queries.give_up_batch(conn, child_id, cursor.next_seq)
                return cursor_queries.get_delivery(conn, child_id)
            cursor_queries.plan_batch(conn, child_id, cursor.next_seq, end)
        else:
            end = cursor.pending_end
            rows = read_rows(conn, child_id, cursor.next_index, end)
            lines = [item_json(r) for r in rows]
            indexes = [r.item_index for r in rows]
        info = BatchInfo(
            run_id=run.id,
            child_id=child_id,
            seq=cursor.next_seq,
            first_index=indexes[0] if indexes else cursor.next_index,
            last_index=indexes[-1] if indexes else end - 1,
            rows=len(lines),
            rows_total=cursor.rows_total,
            last=end >= cursor.rows_total,
        )
        return _Batch(
            url=run.callback_url,
            info=info,
            body=encode_lines(lines),
            message_id=row_batch_message_id(child_id, cursor.next_seq),
            secrets=signing_secrets(
                conn, run.workspace_id, server_key=self._deps.config.callback_secret_key, now=now
            ),
        )

    def _record(
        self,
        conn: Connection,
        attempt: int,
        batch: _Batch,
        outcome: DeliveryOutcome,
        retry_in: float | None,
        final: bool,
    ) -> RowDelivery | None:
        """Record the attempt; move the cursor (delivered) or end the push (final)."""
        info = batch.info
        data: dict[str, Any] = {
            "seq": info.seq,
            "attempt": attempt,
            "webhookId": batch.message_id,
            "rows": info.rows,
            "firstItemIndex": info.first_index,
            "lastItemIndex": info.last_index,
            "last": info.last,
            "target": url_for_log(batch.url),
            "statusCode": outcome.status_code,
        }
        prefix = f"rows batch {info.seq} ({info.rows} rows)"
        if outcome.delivered:
            # None: another sender acknowledged it first (only if two ever overlap); the
            # cursor as it is now tells the caller what is left either way.
            cursor = cursor_queries.acknowledge_batch(
                conn, info.child_id, info.seq
            ) or cursor_queries.get_delivery(conn, info.child_id)
            event_queries.append_event(
                conn,
                info.run_id,
                "rows.batch_delivered",
                f"{prefix} delivered after {attempt} attempt(s)",
                child_id=info.child_id,
                data=data,
                dedupe_key=f"{info.child_id}:rows:{info.seq}:delivered",
            )
            if cursor is not None and not cursor.sending:
                event_queries.append_event(
                    conn,
                    info.run_id,
                    "rows.pushed",
                    f"all {cursor.rows_pushed} rows pushed in {cursor.batches_pushed} batch(es)",
                    child_id=info.child_id,
                    data={"batches": cursor.batches_pushed, "rows": cursor.rows_pushed},
                    dedupe_key=f"{info.child_id}:rows:pushed",
                )
            return cursor
        data |= {"retryable": outcome.retryable and not final, "error": outcome.error}
        if retry_in is not None:
            data["retryInSeconds"] = round(retry_in, 3)
        event_queries.append_event(
            conn,
            info.run_id,
            "rows.batch_attempt",
            f"{prefix} attempt {attempt}: {outcome.error}",
            child_id=info.child_id,
            data=data,
        )
        if final:
            cursor_queries.give_up_batch(conn, info.child_id, info.seq)
            event_queries.append_event(
                conn,
                info.run_id,
                "rows.batch_failed",
                f"{prefix} abandoned after {attempt} attempt(s): {outcome.error}; "
                f"the rest of this child's rows are not pushed (GET /runs/{info.run_id}/items "
                "has them)",
                child_id=info.child_id,
                data=data,
                dedupe_key=f"{info.child_id}:rows:{info.seq}:failed",
            )
        return cursor_queries.get_delivery(conn, info.child_id)

    @activity.defn(name="push_row_batch")
    async def push_row_batch(self, params: PushRowsInput) -> PushRowsResult:
        attempt = activity.info().attempt
        now = datetime.now(UTC)
        prepared = await self._deps.tx(self._prepare, params.child_id, now)
        if prepared is None:
            return PushRowsResult(child_id=params.child_id, done=True)
        if isinstance(prepared, RowDelivery):
            return _result(prepared)
        headers = signed_headers_for_all(prepared.secrets, prepared.message_id, now, prepared.body)
        headers |= batch_headers(prepared.info)
        outcome, final, retry_in = await send_attempt(
            self._deps.config, attempt, prepared.url, prepared.body, headers
        )
        cursor = await self._deps.tx(self._record, attempt, prepared, outcome, retry_in, final)
        if outcome.delivered:
            done = cursor is None or not cursor.sending
            result = _result(cursor) if cursor is not None else None
            return PushRowsResult(
                child_id=params.child_id,
                done=done,
                seq=prepared.info.seq,
                rows=prepared.info.rows,
                batches_pushed=result.batches_pushed if result else 0,
                rows_pushed=result.rows_pushed if result else 0,
            )
        info = prepared.info
        if final:
            raise ApplicationError(
                f"rows batch {info.seq} of {info.child_id} not delivered: {outcome.error}",
                type=ERR_ROWS_PERMANENT,
                non_retryable=True,
            )
        assert retry_in is not None
        raise ApplicationError(
            f"rows batch {info.seq} attempt {attempt} failed: {outcome.error}",
            next_retry_delay=timedelta(seconds=retry_in),
        )


def _result(cursor: RowDelivery) -> PushRowsResult:
    return PushRowsResult(
        child_id=cursor.child_id,
        done=not cursor.sending,
        batches_pushed=cursor.batches_pushed,
        rows_pushed=cursor.rows_pushed,
    )
