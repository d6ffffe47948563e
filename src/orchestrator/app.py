"""Composition root of the HTTP API: settings, engine and Temporal client are built here.

Nothing is created at import time: ``create_app`` is called by ``orchestrator api`` (through
uvicorn's factory mode) and by tests with their own settings.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from sqlalchemy import Engine

from orchestrator import __version__
from orchestrator.api.deps import AppState
from orchestrator.api.errors import install_error_handlers
from orchestrator.api.limits import BodySizeLimit
from orchestrator.api.openapi import install_openapi
from orchestrator.api.routes import admin, catalog, concurrency, health, plans, runs, webhooks
from orchestrator.api.routes import metrics as metrics_routes
from orchestrator.config.bootstrap import prepare_database
from orchestrator.config.settings import Settings
from orchestrator.config.temporal import (
    TemporalSetupError,
    TemporalUnavailable,
    connect_temporal,
    temporal_connection,
)
from orchestrator.dashboard import routes as dashboard_routes
from orchestrator.mcp.http import build_http_server, mcp_route
from orchestrator.observability.collectors import CapacityView
from orchestrator.observability.exposition import (
    api_registry,
    capacity_view,
    temporal_runtime,
)
from orchestrator.observability.tracing import tracing_interceptors
from orchestrator.service.admission import admission_snapshot
from orchestrator.service.auth import register_bootstrap_key

log = logging.getLogger(__name__)

TEMPORAL_CONNECT_ATTEMPTS = 30
#: Paths that enforce their own body limit (the platform's webhook payloads).
BODY_LIMIT_EXEMPT = ("/webhooks/platform",)


def _prepare(settings: Settings) -> Engine:
    engine = prepare_database(settings)
    if settings.bootstrap_admin_key is not None:
        with engine.begin() as conn:
            register_bootstrap_key(conn, settings.bootstrap_admin_key.get_secret_value())
    return engine


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    def current_state() -> AppState:
        state: AppState = app.state.orchestrator
        return state

    mcp_server, mcp_app = build_http_server(settings, current_state)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Wrong Temporal settings stop the start before the database is touched.
        try:
            await asyncio.to_thread(temporal_connection, settings)
        except TemporalSetupError as exc:
            log.error("cannot start: %s", exc)
            raise
        engine = await asyncio.to_thread(_prepare, settings)
        state = AppState(settings=settings, engine=engine)
        app.state.orchestrator = state
        app.state.metrics = api_registry(engine, settings)

        async def capacity() -> CapacityView | None:
            # The admission workflow's snapshot, once this process has a Temporal client.
            if state.temporal is None:
                return None
            return capacity_view(await admission_snapshot(state.temporal, settings.task_queue))

        app.state.metrics.capacity.source = capacity
        # Built once: the runtime binds the SDK's metrics port, tracing sets the provider.
        runtime = temporal_runtime(settings)
        interceptors = tracing_interceptors(settings, "orchestrator-api")
        # Only "not reachable yet" is retried; a refusal (TLS, credentials) ends the start.
        for attempt in range(1, TEMPORAL_CONNECT_ATTEMPTS + 1):
            try:
                state.temporal = await connect_temporal(
                    settings, runtime=runtime, interceptors=interceptors
                )
                break
            except TemporalUnavailable as exc:
                log.warning("Temporal not reachable (attempt %d): %s", attempt, exc)
                await asyncio.sleep(1)
            except TemporalSetupError as exc:
                log.error("cannot start: %s", exc)
                engine.dispose()
                raise
        # The MCP endpoint's session manager lives as long as the app (the SDK requires it).
        async with mcp_server.session_manager.run():
            yield
        engine.dispose()

    app = FastAPI(
        title="Scraper orchestrator",
        version=__version__,
        description="Spawns scraper runs on the platform, tracks them, ingests every row, "
        "and tells the caller when the whole request is done (a signed callback). Every "
        "endpoint except `/healthz` and the platform webhook needs "
        "`Authorization: Bearer <API key>`; errors are `application/problem+json` with a "
        "stable `code` and the offending `field`. See docs/API.md.",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes, exempt=BODY_LIMIT_EXEMPT)
    app.include_router(health.router)
    app.include_router(runs.router)
    app.include_router(admin.router)
    app.include_router(concurrency.router)
    app.include_router(catalog.router)
    app.include_router(plans.router)
    app.include_router(webhooks.router)
    app.include_router(metrics_routes.router)
    app.include_router(dashboard_routes.router)
    app.router.routes.append(mcp_route(mcp_app))
    install_openapi(app, settings)
    return app
