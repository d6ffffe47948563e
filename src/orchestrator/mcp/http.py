"""Serving the tools over Streamable HTTP at ``/mcp``, inside the API process.

The API key is the bearer token, checked by the SDK's token-verifier hook with the same
use case as the HTTP API (``service.auth.authenticate``); a bad or missing key is a 401
before any MCP message is read. The server runs stateless (every POST stands alone, any
API process can answer it) and answers with an SSE stream, which is what carries
``get_run``'s progress notifications.

DNS-rebinding protection (the SDK's Host/Origin allow-list) is off: it guards servers that
trust the browser's network position, while this one trusts only the bearer key, which a
rebinding page does not have; the API is also reached by names the SDK cannot know.
"""

from __future__ import annotations

import asyncio
import logging

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route
from starlette.types import ASGIApp

from orchestrator.config.settings import Settings
from orchestrator.mcp.server import OrchestratorMCP, StateSource, build_server
from orchestrator.service import auth
from orchestrator.service.auth import Principal
from orchestrator.service.errors import Unauthorized

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
_WORKSPACE_CLAIM = "workspaceId"


class ApiKeyVerifier:
    """The SDK's ``TokenVerifier``: a workspace (or admin) API key as the bearer token."""

    def __init__(self, state: StateSource) -> None:
        self._state = state

    async def verify_token(self, token: str) -> AccessToken | None:
        principal = await asyncio.to_thread(auth.authenticate, self._state().engine, token)
        if principal is None:
            # Never log the presented value: it may be a real key with a typo.
            log.warning("rejected an MCP call with an invalid or revoked key")
            return None
        # The key id, never the key itself, is what the SDK keeps for the call.
        return AccessToken(
            token=principal.key_id,
            client_id=principal.key_id,
            scopes=[],
            claims={_WORKSPACE_CLAIM: principal.workspace_id},
        )


async def bearer_caller() -> Principal:
    """The principal of the HTTP call being served (set by the SDK's auth middleware)."""
    token = get_access_token()
    if token is None:
        raise Unauthorized("send the API key as 'Authorization: Bearer <key>'")
    workspace = (token.claims or {}).get(_WORKSPACE_CLAIM)
    return Principal(key_id=token.client_id, workspace_id=workspace)


def build_http_server(settings: Settings, state: StateSource) -> tuple[OrchestratorMCP, ASGIApp]:
    """The tool server and the ASGI app that serves it at ``/mcp``."""
    server = build_server(
        state,
        bearer_caller,
        token_verifier=ApiKeyVerifier(state),
        # No authorization server: keys are issued by the admin API. The issuer is only
        # named, never called.
        auth=AuthSettings(issuer_url=settings.public_url, resource_server_url=None),
    )
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=False,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return server, app


def mcp_route(app: ASGIApp) -> Route:
    """``/mcp`` as one route of the API (any method: the SDK answers GET, POST, DELETE)."""
    return Route(MCP_PATH, endpoint=app)
