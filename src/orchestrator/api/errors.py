"""The one error path: domain errors and validation failures become application/problem+json.

Validation problems name the offending field (as a JSON pointer into the body, or the name
of a query parameter or header) so a caller can fix the request without reading our code.
Every problem has a stable ``code``; ``detail`` never quotes a secret (API keys, callback
secrets and callback URLs, which may carry tokens, are never echoed).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

from orchestrator.domain.errors import DomainError
from orchestrator.service.errors import Unauthorized

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
MALFORMED_BODY = "malformed-body"
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

#: The HTTP status of every domain and service error code (tests check none is missing).
STATUS_OF_CODE: dict[str, int] = {
    "validation-failed": 422,
    "unknown-actor": 400,
    "not-found": 404,
    "unauthorized": 401,
    "forbidden": 403,
    "unsafe-callback-url": 400,
    "too-many-runs": 422,
    "input-too-large": 422,
    "payload-too-large": 413,
    "idempotency-key-reused": 422,
    "invalid-idempotency-key": 400,
    "workspace-required": 422,
    "unavailable": 503,
    "malformed-body": 400,
    "run-mismatch": 409,
    "budget-exhausted": 402,
    "precondition-failed": 412,
    "plan-outdated": 409,
}
_BEARER_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="orchestrator"'}


def problem(
    status: int,
    code: str,
    title: str,
    detail: str,
    *,
    field: str | None = None,
    errors: list[dict[str, Any]] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """Render a problem. Only this module calls it; everything else raises a DomainError
    (or, outside the app's handlers, renders one with :func:`problem_for`)."""
    body: dict[str, Any] = {
        "type": f"urn:orchestrator:problem:{code}",
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
    }
    if field is not None:
        body["field"] = field
    if errors:
        body["errors"] = errors
    return JSONResponse(
        body, status_code=status, media_type=PROBLEM_JSON, headers=dict(headers or {})
    )


def problem_for(exc: DomainError, *, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """The problem+json answer to a domain error: the one place a code gets its status."""
    status = STATUS_OF_CODE.get(exc.code)
    if status is None:
        log.error("domain error code %r has no HTTP status; answering 400", exc.code)
        status = 400
    extra = dict(headers or {})
    if isinstance(exc, Unauthorized):
        extra.update(_BEARER_CHALLENGE)
    return problem(status, exc.code, exc.title, exc.detail, field=exc.field, headers=extra)


def _pointer(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return "/" + "/".join(parts)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def _domain(_request: Request, exc: DomainError) -> JSONResponse:
        return problem_for(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"field": _pointer(tuple(err.get("loc", ()))), "message": err.get("msg", "")}
            for err in exc.errors()
        ]
        first = errors[0] if errors else {"field": "/", "message": "invalid request"}
        return problem(
            422,
            "validation-failed",
            "The request is not valid",
            f"{first['field']}: {first['message']}",
            field=first["field"],
            errors=errors,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {
            # FastAPI's only 400: a body it cannot decode (the webhook answers the same code).
            400: MALFORMED_BODY,
            404: "not-found",
            405: "method-not-allowed",
            413: "payload-too-large",
        }.get(exc.status_code, "http-error")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = allowed_methods(request)
        return problem(exc.status_code, code, str(exc.detail), str(exc.detail), headers=headers)


def allowed_methods(request: Request) -> str:
    """Every method the request's path serves. Starlette's own ``Allow`` names only the route
    that matched first, but GET and POST /runs, say, are separate routes; so each method is
    tried against every route (a route matches a method fully only if it serves it)."""
    routes: list[BaseRoute] = request.app.router.routes
    served = [
        method
        for method in _METHODS
        if any(r.matches({**request.scope, "method": method})[0] is Match.FULL for r in routes)
    ]
    return ", ".join(served)
