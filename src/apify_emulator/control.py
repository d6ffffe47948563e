"""The emulator's own control API under `/_emulator/` (no Apify token, JSON bodies).

Kept apart from the Apify surface so tests and benchmarks can steer faults
and read counters without those calls being counted or rate limited; the
trade-off is that anyone who can reach the port can reconfigure it, which is
fine for a local test double and the reason it binds to 127.0.0.1 by default.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from apify_emulator.errors import JSON_MEDIA_TYPE, ApiError

if TYPE_CHECKING:
    from apify_emulator.app import Emulator

log = logging.getLogger(__name__)


def _ok(data: Any, status: int = 200) -> JSONResponse:
    return JSONResponse({"data": data}, status_code=status, media_type=JSON_MEDIA_TYPE)


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        raise ApiError(400, "invalid-request", "Body must be a JSON object") from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid-request", "Body must be a JSON object")
    return body


def control_routes(em: Emulator) -> list[BaseRoute]:
    return _Control(em).routes()


class _Control:
    """One handler per control endpoint, all steering the one `Emulator`."""

    def __init__(self, em: Emulator) -> None:
        self.em = em

    async def health(self, request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def stats(self, request: Request) -> Response:
        return _ok(self.em.stats.snapshot())

    async def reset_stats(self, request: Request) -> Response:
        self.em.stats.reset()
        return _ok(self.em.stats.snapshot())

    async def reset(self, request: Request) -> Response:
        body = await _body(request)
        if body.get("runs", True):
            self.em.dispatcher.forget_all()
            self.em.store.reset()
        if body.get("faults", True):
            self.em.faults.clear()
        if body.get("stats", True):
            self.em.stats.reset()
        if body.get("rateLimits", True):
            cfg = self.em.cfg
            self.em.limiter.update(
                {
                    "rps": cfg.rate_limit_rps,
                    "startRps": cfg.rate_limit_start_rps,
                    "retryAfterSecs": cfg.rate_limit_retry_after_secs,
                }
            )
        log.info("reset %s", body or "everything")
        return _ok({"reset": True})

    async def list_faults(self, request: Request) -> Response:
        return _ok(self.em.faults.describe())

    async def clear_faults(self, request: Request) -> Response:
        self.em.faults.clear()
        return _ok(self.em.faults.describe())

    async def delete_fault(self, request: Request) -> Response:
        if not self.em.faults.remove(request.path_params["faultId"]):
            raise ApiError.not_found("Fault was not found")
        return _ok(self.em.faults.describe())

    async def add_http(self, request: Request) -> Response:
        return _ok(dataclasses.asdict(self.em.faults.add_http(await _body(request))), 201)

    async def add_lost_start(self, request: Request) -> Response:
        return _ok(dataclasses.asdict(self.em.faults.add_lost_start(await _body(request))), 201)

    async def add_webhook(self, request: Request) -> Response:
        return _ok(dataclasses.asdict(self.em.faults.add_webhook(await _body(request))), 201)

    async def rate_limits(self, request: Request) -> Response:
        return _ok(self.em.limiter.describe())

    async def set_rate_limits(self, request: Request) -> Response:
        self.em.limiter.update(await _body(request))
        log.info("rate limits now %s", self.em.limiter.describe())
        return _ok(self.em.limiter.describe())

    async def config(self, request: Request) -> Response:
        data = dataclasses.asdict(self.em.cfg)
        data["tokens"] = ["***" for _ in self.em.cfg.tokens]  # never echo secrets
        data.pop("extra", None)
        return _ok(data)

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/_emulator/health", self.health, methods=["GET"]),
            Route("/_emulator/config", self.config, methods=["GET"]),
            Route("/_emulator/stats", self.stats, methods=["GET"]),
            Route("/_emulator/stats/reset", self.reset_stats, methods=["POST"]),
            Route("/_emulator/reset", self.reset, methods=["POST"]),
            Route("/_emulator/faults", self.list_faults, methods=["GET"]),
            Route("/_emulator/faults", self.clear_faults, methods=["DELETE"]),
            Route("/_emulator/faults/http", self.add_http, methods=["POST"]),
            Route("/_emulator/faults/lost-start", self.add_lost_start, methods=["POST"]),
            Route("/_emulator/faults/webhooks", self.add_webhook, methods=["POST"]),
            Route("/_emulator/faults/{faultId}", self.delete_fault, methods=["DELETE"]),
            Route("/_emulator/rate-limits", self.rate_limits, methods=["GET"]),
            Route("/_emulator/rate-limits", self.set_rate_limits, methods=["PUT"]),
        ]
