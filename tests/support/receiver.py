"""A tiny HTTP receiver on 127.0.0.1 that records callbacks and answers scripted statuses."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


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


@contextmanager
def callback_receiver(statuses: list[int] | None = None, path: str = "/hook") -> Iterator[Receiver]:
    """Answer each POST with the next of ``statuses`` (then 200), recording every request."""
    receiver = Receiver(url="", statuses=list(statuses or []))
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            with lock:
                receiver.received.append(
                    Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
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
