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
    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def stats(request: Request) -> Response:
        return _ok(em.stats.snapshot())

    async def reset_stats(request: Request) -> Response:
        em.stats.reset()
        return _ok(em.stats.snapshot())

    async def reset(request: Request) -> Response:
        body = await _body(request)
        if body.get("runs", True):
            em.dispatcher.forget_all()
            em.store.reset()
        if body.get("faults", True):
            em.faults.clear()
        if body.get("stats", True):
            em.stats.reset()
        log.info("reset %s", body or "everything")
        return _ok({"reset": True})

    async def list_faults(request: Request) -> Response:
        return _ok(em.faults.describe())

    async def clear_faults(request: Request) -> Response:
        em.faults.clear()
        return _ok(em.faults.describe())

    async def delete_fault(request: Request) -> Response:
        if not em.faults.remove(request.path_params["faultId"]):
            raise ApiError.not_found("Fault was not found")
        return _ok(em.faults.describe())

    async def add_http(request: Request) -> Response:
        return _ok(dataclasses.asdict(em.faults.add_http(await _body(request))), 201)

    async def add_lost_start(request: Request) -> Response:
        return _ok(dataclasses.asdict(em.faults.add_lost_start(await _body(request))), 201)

    async def add_webhook(request: Request) -> Response:
        return _ok(dataclasses.asdict(em.faults.add_webhook(await _body(request))), 201)

    async def config(request: Request) -> Response:
        data = dataclasses.asdict(em.cfg)
        data["tokens"] = ["***" for _ in em.cfg.tokens]  # never echo secrets
        data.pop("extra", None)
        return _ok(data)

    return [
        Route("/_emulator/health", health, methods=["GET"]),
        Route("/_emulator/config", config, methods=["GET"]),
        Route("/_emulator/stats", stats, methods=["GET"]),
        Route("/_emulator/stats/reset", reset_stats, methods=["POST"]),
        Route("/_emulator/reset", reset, methods=["POST"]),
        Route("/_emulator/faults", list_faults, methods=["GET"]),
        Route("/_emulator/faults", clear_faults, methods=["DELETE"]),
        Route("/_emulator/faults/http", add_http, methods=["POST"]),
        Route("/_emulator/faults/lost-start", add_lost_start, methods=["POST"]),
        Route("/_emulator/faults/webhooks", add_webhook, methods=["POST"]),
        Route("/_emulator/faults/{faultId}", delete_fault, methods=["DELETE"]),
    ]
