"""Bearer API key authentication as FastAPI dependencies (``Caller``, ``AdminCaller``).

Declared through ``HTTPBearer`` so the OpenAPI document and /docs show the scheme; with
``auto_error=False`` so a missing key goes through our problem+json path (401 with
``WWW-Authenticate``) instead of FastAPI's own error. Keys are accepted only in the
``Authorization`` header, never in a query string, where they would end up in access logs.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from orchestrator.api.deps import State
from orchestrator.service import auth
from orchestrator.service.auth import Principal
from orchestrator.service.errors import Forbidden, Unauthorized

log = logging.getLogger(__name__)

bearer_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    bearerFormat="ork_<key id>_<secret>",
    description="An API key: `Authorization: Bearer ork_…`. Workspace keys see only their "
    "workspace; admin keys see everything and manage keys.",
)


async def require_key(
    state: State,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
) -> Principal:
    if credentials is None:
        raise Unauthorized("send the API key as 'Authorization: Bearer <key>'")
    principal = await asyncio.to_thread(auth.authenticate, state.engine, credentials.credentials)
    if principal is None:
        # Never log the presented value: it may be a real key with a typo.
        log.warning("rejected an API call with an invalid or revoked key")
        raise Unauthorized("the API key is invalid or revoked")
    return principal


Caller = Annotated[Principal, Depends(require_key)]


def require_admin(caller: Caller) -> Principal:
    if not caller.admin:
        raise Forbidden("this operation needs an admin key")
    return caller


AdminCaller = Annotated[Principal, Depends(require_admin)]
