"""Application factory: wires config, store, faults, webhook dispatcher and routes.

`create_app` returns a plain Starlette app (FastAPI's validation layer would
turn bad params into 422s, while Apify answers 400 with its own envelope).
One `Emulator` object owns all state for one app instance, so tests can run
several emulators in one process; the trade-off is that nothing is global and
everything must be reached through `app.state.emulator`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from apify_emulator.api import ApifyApi
from apify_emulator.config import EmulatorConfig
from apify_emulator.control import control_routes
from apify_emulator.errors import ApiError
from apify_emulator.faults import Faults, RateLimiter, Stats
from apify_emulator.middleware import HIDE_DROP_CONNECTION, DropConnection, EmulatorMiddleware
from apify_emulator.state import Store
from apify_emulator.webhooks import WebhookDispatcher

log = logging.getLogger(__name__)


class Emulator:
    """All state of one emulator instance."""

    def __init__(self, cfg: EmulatorConfig) -> None:
        self.cfg = cfg
        self.store = Store(cfg)
        self.faults = Faults(cfg.fault_seed)
        self.stats = Stats()
        self.limiter = RateLimiter(
            cfg.rate_limit_rps, cfg.rate_limit_start_rps, cfg.rate_limit_retry_after_secs
        )
        self.dispatcher = WebhookDispatcher(cfg, self.store, self.faults, self.stats)
        self.api = ApifyApi(cfg, self.store, self.dispatcher)
        self.routes: list[BaseRoute] = []


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        allowed = exc.headers.get("Allow", "") if exc.headers else ""
        return ApiError(
            405,
            "method-not-allowed",
            "This API end-point can only be accessed using the following HTTP methods: "
            f"OPTIONS,{allowed}",
        ).response()
    if exc.status_code == 404:
        return ApiError(
            404,
            "page-not-found",
            "We have bad news: there is no API endpoint at "
            f"this URL. Did you specify it correctly? ({request.url.path})",
        ).response()
    return ApiError(exc.status_code, "internal-server-error", str(exc.detail)).response()


async def _crash(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, DropConnection):  # deliberate (fault injection), not a crash
        log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return ApiError(500, "internal-server-error", "Internal server error").response()


def create_app(config: EmulatorConfig | None = None) -> Starlette:
    cfg = config or EmulatorConfig.from_env()
    emulator = Emulator(cfg)
    logging.getLogger("uvicorn.error").addFilter(HIDE_DROP_CONNECTION)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await emulator.dispatcher.start()
        log.info(
            "apify emulator ready (time_scale=%s, state=%s)",
            cfg.time_scale,
            cfg.state_file or "memory",
        )
        try:
            yield
        finally:
            await emulator.dispatcher.stop()
            emulator.store.close()

    app = Starlette(
        routes=[*emulator.api.routes(), *control_routes(emulator)],
        middleware=[Middleware(EmulatorMiddleware, emulator=emulator)],
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            Exception: _crash,
        },
        lifespan=lifespan,
    )
    emulator.routes = app.routes
    app.state.emulator = emulator
    return app
