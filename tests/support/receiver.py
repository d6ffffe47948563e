"""A tiny HTTP receiver on 127.0.0.1 that records callbacks and answers scripted statuses,
and how a receiver assembles rows pushed in batches (``assemble_row_batches``)."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from orchestrator.delivery.signing import verify


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str
    statuses: list[int] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    retry_after: str | None = None
    #: Decides a request's status before ``statuses`` do (None: fall through to them).
    status_for: Callable[[Received], int | None] | None = None


@contextmanager
def callback_receiver(statuses: list[int] | None = None, path: str = "/hook") -> Iterator[Receiver]:
    """Answer each POST with the next of ``statuses`` (then 200), recording every request."""
    receiver = Receiver(url="", statuses=list(statuses or []))
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            got = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            with lock:
                receiver.received.append(got)
                chosen = receiver.status_for(got) if receiver.status_for else None
                if chosen is not None:
                    status = chosen
                else:
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
            self.send_response(status)
            if receiver.retry_after is not None and status in (429, 503):
                self.send_header("Retry-After", receiver.retry_after)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@dataclass
class PushedRows:
    """What a receiver of ``deliver.rows = "callback"`` assembled from the batches it got."""

    #: Rows per child, in item-index order, each exactly once.
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: Sequence numbers per child in the order first received.
    seqs: dict[str, list[int]] = field(default_factory=dict)
    #: Batches received again (same webhook-id), dropped as duplicates.
    duplicates: int = 0
    #: Children whose last batch (``X-Orchestrator-Batch-Last: true``) arrived.
    finished: set[str] = field(default_factory=set)


def is_row_batch(received: Received) -> bool:
    return received.headers.get("content-type", "").startswith("application/x-ndjson")


def assemble_row_batches(received: list[Received], secret: str) -> PushedRows:
    """Verify every batch (Standard Webhooks), drop repeats by ``webhook-id``, and check as a
    receiver would that no batch is missing: per child, sequence numbers go 1, 2, 3, ... and
    each batch's first item index follows the previous batch's last one."""
    out = PushedRows()
    seen: set[str] = set()
    for message in received:
        if not is_row_batch(message):
            continue
        verify(secret, message.body, message.headers, json_parse=False)
        message_id = message.headers["webhook-id"]
        if message_id in seen:
            out.duplicates += 1
            continue
        seen.add(message_id)
        child = message.headers["x-orchestrator-child-id"]
        seq = int(message.headers["x-orchestrator-batch-seq"])
        assert message_id == f"rows_{child.replace('.', '_')}_{seq}"
        seqs = out.seqs.setdefault(child, [])
        assert seq == len(seqs) + 1, f"gap before batch {seq} of {child}: had {seqs}"
        seqs.append(seq)
        rows = [json.loads(line) for line in message.body.decode("utf-8").splitlines()]
        kept = out.rows.setdefault(child, [])
        first = int(message.headers["x-orchestrator-first-item-index"])
        expected_first = kept[-1]["itemIndex"] + 1 if kept else 0
        assert first == expected_first, f"rows missing before item {first} of {child}"
        assert rows[0]["itemIndex"] == first
        assert rows[-1]["itemIndex"] == int(message.headers["x-orchestrator-last-item-index"])
        assert all(r["childId"] == child for r in rows)
        kept.extend(rows)
        if message.headers["x-orchestrator-batch-last"] == "true":
            assert len(kept) == int(message.headers["x-orchestrator-child-rows-total"])
            out.finished.add(child)
    return out
