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

from orchestrator.domain.errors import DomainError
from orchestrator.service.errors import Unauthorized

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"

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
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not-found", 405: "method-not-allowed", 413: "payload-too-large"}.get(
            exc.status_code, "http-error"
        )
        return problem(exc.status_code, code, str(exc.detail), str(exc.detail), headers=exc.headers)


_STATUS_TEXT = {
    400: "Bad request (e.g. an unknown actor or an unsafe callback URL)",
    401: "Missing, invalid or revoked API key",
    403: "The key may not do this (an admin key is required)",
    404: "Not found (or owned by another workspace)",
    413: "Request body too large",
    422: "The request is not valid; `field` names the offending part",
    503: "The workflow engine is unavailable; nothing was created",
}


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for problem+json answers (see ``Problem``)."""
    from orchestrator.api.schemas import Problem

    return {status: {"model": Problem, "description": _STATUS_TEXT[status]} for status in statuses}
