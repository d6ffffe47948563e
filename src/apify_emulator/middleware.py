"""ASGI middleware in front of the Apify routes: stats, rate limit, faults, gzip bodies.

Done at the ASGI level (not per handler) so injected faults and rate limits
apply uniformly, are counted like real calls, and can do things a handler
cannot — e.g. let a run start succeed and then drop the connection. The
trade-off: the "close" mode has to provoke the server into closing the socket
by raising after the response head was sent; we filter that one traceback out
of uvicorn's log.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import zlib
from typing import TYPE_CHECKING, Any

from starlette.datastructures import MutableHeaders
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from apify_emulator.errors import ApiError
from apify_emulator.faults import ERROR_TYPES

if TYPE_CHECKING:
    from apify_emulator.app import Emulator

log = logging.getLogger(__name__)


class DropConnection(Exception):
    """Raised after the response head so the server closes the connection mid-answer."""


class _HideDropConnection(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], DropConnection))


HIDE_DROP_CONNECTION = _HideDropConnection()


def route_template(routes: list[BaseRoute], scope: Scope) -> str:
    for route in routes:
        match, _ = route.matches(scope)
        if match != Match.NONE:
            return f"{scope['method']} {getattr(route, 'path', '?')}"
    return f"{scope['method']} <unmatched>"


class EmulatorMiddleware:
    def __init__(self, app: ASGIApp, emulator: Emulator) -> None:
        self.app = app
        self.emulator = emulator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] != "http" or not path.startswith("/v2"):
            await self.app(scope, receive, send)
            return
        em = self.emulator
        method: str = scope["method"]
        route = route_template(em.routes, scope)
        status = 0
        allowed, limit = em.limiter.check(method, path)

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if limit > 0:
                    MutableHeaders(scope=message)["X-RateLimit-Limit"] = str(limit)
            await send(message)

        try:
            if not allowed:
                retry_after = em.limiter.retry_after_secs
                error = ApiError(
                    429,
                    "rate-limit-exceeded",
                    f"You have exceeded the rate limit of {limit} requests per second",
                    headers={"Retry-After": str(retry_after)} if retry_after > 0 else None,
                )
                await error.response()(scope, receive, send_wrapper)
                return
            fault = em.faults.take_http(method, path)
            if fault is not None:
                if fault.delayMs > 0:
                    await asyncio.sleep(fault.delayMs / 1000)
                if fault.status is not None:
                    log.info("fault: answering %s %s with %d", method, path, fault.status)
                    error = ApiError(
                        fault.status,
                        fault.errorType or ERROR_TYPES.get(fault.status, "internal-server-error"),
                        fault.message or f"Injected fault ({fault.status})",
                        headers=None
                        if fault.retryAfter is None
                        else {"Retry-After": str(fault.retryAfter)},
                    )
                    await error.response()(scope, receive, send_wrapper)
                    return
            try:
                receive = await decode_body(scope, receive)
            except ApiError as error:
                await error.response()(scope, receive, send_wrapper)
                return
            mode = em.faults.take_lost_start(method, path)
            if mode is not None:
                await self._lose_answer(scope, receive, send_wrapper, mode)
                return
            await self.app(scope, receive, send_wrapper)
        finally:
            em.stats.record(route, status)

    async def _lose_answer(self, scope: Scope, receive: Receive, send: Send, mode: str) -> None:
        """Handle the request for real (the run is created), then withhold the answer."""
        inner_status = 0

        async def discard(message: Message) -> None:
            nonlocal inner_status
            if message["type"] == "http.response.start":
                inner_status = message["status"]

        await self.app(scope, receive, discard)
        log.info(
            "fault: lost answer (%s) for %s %s (handled with %d)",
            mode,
            scope["method"],
            scope["path"],
            inner_status,
        )
        if mode == "error":
            error = ApiError(500, "internal-server-error", "Injected fault: lost start answer")
            await error.response()(scope, receive, send)
            return
        if mode == "hang":
            await asyncio.sleep(self.emulator.cfg.lost_answer_hang_secs)
        await send(
            {
                "type": "http.response.start",
                "status": 201,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"4096")],
            }
        )
        raise DropConnection("lost start answer")


async def decode_body(scope: Scope, receive: Receive) -> Receive:
    """Undo `Content-Encoding: gzip|deflate` on request bodies (apify-client gzips >= 1 KiB)."""
    headers = MutableHeaders(scope=scope)
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return receive
    chunks: list[bytes] = []
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return receive
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    raw = b"".join(chunks)
    try:
        if encoding in ("gzip", "x-gzip"):
            body = gzip.decompress(raw)
        elif encoding == "deflate":
            try:
                body = zlib.decompress(raw)
            except zlib.error:
                body = zlib.decompress(raw, -zlib.MAX_WBITS)
        else:
            raise ApiError(
                415,
                "unsupported-content-encoding",
                f'Content-Encoding "{encoding}" is not supported',
            )
    except (OSError, EOFError, zlib.error):
        raise ApiError(
            400, "invalid-request", f"Request body is not valid {encoding} data"
        ) from None
    del headers["content-encoding"]
    headers["content-length"] = str(len(body))
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return dict(await receive())

    return replay
