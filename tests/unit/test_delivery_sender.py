"""CallbackSender against a tiny HTTP/1.1 responder on 127.0.0.1 (no outside network)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from orchestrator.delivery.sender import (
    CALLBACK_RETRY_SCHEDULE,
    MAX_RETRY_AFTER_SECONDS,
    CallbackSender,
    DeliveryOutcome,
    classify_response,
    parse_retry_after,
)
from orchestrator.delivery.signing import (
    callback_message_id,
    new_webhook_secret,
    signed_headers,
    verify,
)


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Responder:
    """Answers by path; records every request it fully read."""

    port: int = 0
    received: list[Received] = field(default_factory=list)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def paths(self) -> list[str]:
        return [r.path for r in self.received]

    def reply(self, path: str) -> tuple[int, list[tuple[str, str]], bytes]:
        if path == "/ok":
            return 204, [], b""
        if path == "/redirect":
            return 302, [("Location", f"{self.base}/target")], b""
        if path == "/target":
            return 200, [], b"reached"
        if path == "/fail":
            return 500, [], b"boom"
        if path == "/gone":
            return 410, [], b""
        if path == "/busy":
            return 429, [("Retry-After", "7")], b""
        if path == "/busy-long":
            return 503, [("Retry-After", "86400")], b""
        if path == "/big":
            return 200, [], b"x" * 2_000_000
        return 404, [], b"not found"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, path, _ = request_line.split(" ", 2)
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (line.partition(":") for line in header_lines if line)
            }
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.received.append(Received(method, path, headers, body))
            if path == "/slow":
                await asyncio.Event().wait()  # never answers; cancelled at teardown
            status, extra, payload = self.reply(path)
            lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(payload)}", "Connection: close"]
            lines += [f"{k}: {v}" for k, v in extra]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self.tasks.discard(task)


@pytest.fixture
async def responder() -> AsyncIterator[Responder]:
    r = Responder()
    server = await asyncio.start_server(r.handle, "127.0.0.1", 0)
    r.port = server.sockets[0].getsockname()[1]
    try:
        yield r
    finally:
        server.close()
        for task in list(r.tasks):
            task.cancel()
        await asyncio.gather(*r.tasks, return_exceptions=True)
        await server.wait_closed()


@pytest.fixture
async def sender() -> AsyncIterator[CallbackSender]:
    async with CallbackSender(total_timeout_seconds=2.0, connect_timeout_seconds=1.0) as s:
        yield s


SECRET = new_webhook_secret()
BODY = json.dumps({"type": "run.succeeded", "data": {"run_id": "run_1"}}).encode()


def headers() -> dict[str, str]:
    msg_id = callback_message_id("run_1", "succeeded")
    return signed_headers(SECRET, msg_id, datetime.now(UTC), BODY)


async def post(sender: CallbackSender, url: str) -> DeliveryOutcome:
    return await sender.send(url, BODY, headers(), allow_insecure_localhost=True)


async def test_delivered_with_exact_signed_bytes(
    sender: CallbackSender, responder: Responder
) -> None:
    outcome = await post(sender, f"{responder.base}/ok")
    assert outcome == DeliveryOutcome(
        delivered=True, status_code=204, retryable=False, error=None, retry_after_seconds=None
    )
    [got] = responder.received
    assert got.method == "POST" and got.body == BODY
    assert got.headers["content-type"] == "application/json"
    # The receiver side: what arrived verifies with the shared secret.
    assert verify(SECRET, got.body, got.headers) == json.loads(BODY)


async def test_redirect_is_not_followed(sender: CallbackSender, responder: Responder) -> None:
    outcome = await post(sender, f"{responder.base}/redirect")
    assert (outcome.delivered, outcome.retryable, outcome.status_code) == (False, False, 302)
    assert outcome.error is not None and "redirect" in outcome.error
    assert responder.paths() == ["/redirect"]  # the target was never hit


async def test_server_error_is_retryable(sender: CallbackSender, responder: Responder) -> None:
    outcome = await post(sender, f"{responder.base}/fail")
    assert (outcome.delivered, outcome.retryable, outcome.status_code) == (False, True, 500)
    assert outcome.retry_after_seconds is None


async def test_not_found_is_permanent(sender: CallbackSender, responder: Responder) -> None:
    outcome = await post(sender, f"{responder.base}/nowhere")
    assert (outcome.delivered, outcome.retryable, outcome.status_code) == (False, False, 404)


async def test_gone_is_permanent(sender: CallbackSender, responder: Responder) -> None:
    outcome = await post(sender, f"{responder.base}/gone")
    assert (outcome.delivered, outcome.retryable, outcome.status_code) == (False, False, 410)


async def test_too_many_requests_honours_retry_after(
    sender: CallbackSender, responder: Responder
) -> None:
    outcome = await post(sender, f"{responder.base}/busy")
    assert (outcome.delivered, outcome.retryable, outcome.status_code) == (False, True, 429)
    assert outcome.retry_after_seconds == 7.0


async def test_retry_after_is_capped(sender: CallbackSender, responder: Responder) -> None:
    outcome = await post(sender, f"{responder.base}/busy-long")
    assert outcome.retryable and outcome.retry_after_seconds == MAX_RETRY_AFTER_SECONDS


async def test_large_response_body_is_not_read(
    sender: CallbackSender, responder: Responder
) -> None:
    outcome = await post(sender, f"{responder.base}/big")
    assert outcome.delivered and outcome.status_code == 200


async def test_timeout_is_retryable(responder: Responder) -> None:
    async with CallbackSender(total_timeout_seconds=0.3) as quick:
        outcome = await post(quick, f"{responder.base}/slow")
    assert (outcome.delivered, outcome.retryable, outcome.status_code) == (False, True, None)
    assert outcome.error == "timed out"


async def test_connection_refused_is_retryable(sender: CallbackSender) -> None:
    # Bind then close a socket to get a port nobody listens on.
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    outcome = await post(sender, f"http://127.0.0.1:{port}/ok")
    assert (outcome.delivered, outcome.retryable) == (False, True)
    assert outcome.error is not None and f"{port}" not in outcome.error


async def test_unsafe_url_is_permanent_and_never_sent(
    sender: CallbackSender, responder: Responder
) -> None:
    for url in (
        f"{responder.base}/ok",  # http to localhost without the dev exception
        "https://169.254.169.254/latest/meta-data/",
        "https://user:pw@example.com/",
    ):
        outcome = await sender.send(url, BODY, headers())
        assert (outcome.delivered, outcome.retryable, outcome.status_code) == (False, False, None)
        assert outcome.error is not None and outcome.error.startswith("unsafe callback URL")
        assert "pw" not in outcome.error
    assert responder.received == []


async def test_dns_rebinding_is_refused_before_connecting() -> None:
    async def rebinding(host: str, port: int) -> Sequence[str]:
        return ["93.184.215.14", "10.0.0.7"]

    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(204)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        s = CallbackSender(client, resolver=rebinding)
        outcome = await s.send("https://hooks.example.com/cb", BODY, headers())
    assert (outcome.delivered, outcome.retryable) == (False, False)
    assert outcome.error is not None and "non-public" in outcome.error
    assert calls == []


async def test_public_resolution_sends_to_normalised_url() -> None:
    async def public(host: str, port: int) -> Sequence[str]:
        assert (host, port) == ("hooks.example.com", 8443)
        return ["93.184.215.14"]

    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        s = CallbackSender(client, resolver=public)
        outcome = await s.send("HTTPS://Hooks.Example.COM.:8443/cb?x=1#f", BODY, headers())
        await s.aclose()  # does not close an injected client
        assert not client.is_closed
    assert outcome.delivered
    [request] = calls
    assert str(request.url) == "https://hooks.example.com:8443/cb?x=1"
    assert request.content == BODY


async def test_dns_failure_is_retryable() -> None:
    async def failing(host: str, port: int) -> Sequence[str]:
        raise OSError("temporary failure in name resolution")

    async with CallbackSender(resolver=failing) as s:
        outcome = await s.send("https://hooks.example.com/cb", BODY, headers())
    assert (outcome.delivered, outcome.retryable, outcome.error) == (
        False,
        True,
        "could not resolve host",
    )


# --- pure helpers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (200, (True, False)),
        (201, (True, False)),
        (204, (True, False)),
        (299, (True, False)),
        (100, (False, False)),
        (301, (False, False)),
        (302, (False, False)),
        (307, (False, False)),
        (308, (False, False)),
        (400, (False, False)),
        (401, (False, False)),
        (403, (False, False)),
        (404, (False, False)),
        (408, (False, True)),
        (410, (False, False)),
        (413, (False, False)),
        (422, (False, False)),
        (429, (False, True)),
        (500, (False, True)),
        (502, (False, True)),
        (503, (False, True)),
        (504, (False, True)),
        (599, (False, True)),
    ],
)
def test_classify_response(status: int, expected: tuple[bool, bool]) -> None:
    assert classify_response(status) == expected


NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("0", 0.0),
        ("120", 120.0),
        (" 30 ", 30.0),
        ("999999", 3600.0),
        ("-5", None),
        ("1.5", None),
        ("soon", None),
        (format_datetime(NOW + timedelta(seconds=90), usegmt=True), 90.0),
        (format_datetime(NOW - timedelta(seconds=90), usegmt=True), 0.0),
        (format_datetime(NOW + timedelta(days=3), usegmt=True), 3600.0),
        ("Thu, 01 Jan 2026 12:02:00 -0000", 120.0),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, now=NOW) == expected


def test_retry_schedule_spans_about_a_day() -> None:
    s = CALLBACK_RETRY_SCHEDULE
    waits = s.waits()
    assert len(waits) == s.maximum_attempts - 1
    assert waits[:3] == [5.0, 10.0, 20.0]
    assert max(waits) == s.maximum_interval_seconds == MAX_RETRY_AFTER_SECONDS
    assert 20 * 3600 <= s.total_wait_seconds() <= 26 * 3600
