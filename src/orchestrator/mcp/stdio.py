"""``orchestrator mcp``: the same tools over stdio, for desktop MCP clients.

The client starts this process; it talks MCP on stdin/stdout (logs go to stderr) and acts
with one API key, ``ORCHESTRATOR_API_KEY``, checked at start and again on every call, so a
revoked key stops working at once. It reads and writes the database and starts workflows
like the API does, so it needs the same settings (``ORCHESTRATOR_DATABASE_URL``, the
Temporal address); it does not migrate the database (the API and worker do).
"""

from __future__ import annotations

import asyncio
import logging

from orchestrator.api.deps import AppState
from orchestrator.config.settings import Settings
from orchestrator.config.temporal import TemporalUnavailable, connect_temporal
from orchestrator.db.engine import build_engine
from orchestrator.mcp.server import build_server
from orchestrator.service import auth
from orchestrator.service.auth import Principal
from orchestrator.service.errors import Unauthorized

log = logging.getLogger(__name__)


class KeyRejected(RuntimeError):
    """``ORCHESTRATOR_API_KEY`` is not a valid, active key."""


async def run_stdio(settings: Settings, api_key: str) -> None:
    engine = build_engine(settings.database_url)
    try:
        if await asyncio.to_thread(auth.authenticate, engine, api_key) is None:
            raise KeyRejected("ORCHESTRATOR_API_KEY is invalid or revoked")
        state = AppState(settings=settings, engine=engine)
        try:
            state.temporal = await connect_temporal(settings)
        except TemporalUnavailable as exc:
            # A refusal (TLS, credentials) ends the start; an unreachable Temporal does not.
            # Reads still work; submit and abort answer "unavailable" until it is back.
            log.warning("Temporal not reachable: %s", exc)

        async def caller() -> Principal:
            principal = await asyncio.to_thread(auth.authenticate, engine, api_key)
            if principal is None:
                raise Unauthorized("the API key is invalid or revoked")
            return principal

        server = build_server(lambda: state, caller)
        await server.run_stdio_async()
    finally:
        engine.dispose()
