"""Request body size limit (413), enforced before FastAPI reads or parses anything.

A pure ASGI middleware: ``Content-Length`` above the limit is refused at once, and the body
is counted while it is read, because the header may be absent (chunked) or lie. The body is
buffered up to the limit and replayed to the app; that is cheap because the limit is small
(control-plane JSON, 256 KiB by default) and it is the only way to answer 413 cleanly
instead of failing half-way through parsing. Paths in ``exempt`` (the platform webhook,
which enforces its own limit) pass through untouched.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.api.errors import problem_for
from orchestrator.service.errors import PayloadTooLarge

_WITH_BODY = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class BodySizeLimit:
    def __init__(self, app: ASGIApp, *, max_bytes: int, exempt: Iterable[str] = ()) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.exempt = frozenset(exempt)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Outside the app's exception handlers, so the error is rendered here, the same way.
        response = problem_for(
            PayloadTooLarge(f"the request body exceeds {self.max_bytes} bytes"),
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in _WITH_BODY
            or scope["path"] in self.exempt
        ):
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and (not value.isdigit() or int(value) > self.max_bytes):
                await self._too_large(scope, receive, send)
                return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                # The client went away; let the app see the disconnect.
                await self.app(scope, _replay([message], receive), send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, _replay([body], receive), send)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
