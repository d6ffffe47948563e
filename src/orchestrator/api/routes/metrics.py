"""``GET /metrics``: the API process's Prometheus metrics (docs/OPERATIONS.md).

It shares the public API port, and its gauges name workspaces, so it needs an admin API key
unless ``METRICS_REQUIRE_KEY`` is off (for an API port only the internal network reaches).
Prometheus sends the key with ``authorization: {credentials: ...}`` in its scrape config.
Not in the OpenAPI document: it is for operators' scrapers, not API callers.

The database queries and the encoding run on a thread, so a scrape never stalls the loop.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials
from prometheus_client.exposition import choose_encoder

from orchestrator.api.auth import bearer_scheme, require_admin, require_key
from orchestrator.api.deps import State
from orchestrator.observability.exposition import ApiMetrics

router = APIRouter(include_in_schema=False)


async def metrics_access(
    state: State,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
) -> None:
    """An admin key, unless the settings open the endpoint."""
    if state.settings.metrics_require_key:
        require_admin(await require_key(state, credentials))


@router.get("/metrics", dependencies=[Depends(metrics_access)])
async def metrics(request: Request) -> Response:
    served: ApiMetrics = request.app.state.metrics
    await served.capacity.refresh()
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    body = await asyncio.to_thread(encoder, served.registry)
    return Response(body, headers={"Content-Type": content_type})
