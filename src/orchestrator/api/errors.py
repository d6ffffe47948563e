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

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
MALFORMED_BODY = "malformed-body"
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


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


def _pointer(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return "/" + "/".join(parts)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def _domain(_request: Request, exc: DomainError) -> JSONResponse:
        headers: Mapping[str, str] | None = getattr(exc, "headers", None)
        return problem(
            exc.status, exc.code, exc.title, exc.detail, field=exc.field, headers=headers
        )

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
