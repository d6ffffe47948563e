"""Tool errors: the same ``code``, ``detail`` and ``field`` the HTTP API's problem+json carries.

A domain or service error becomes a tool result with ``isError: true``: its text is the
problem as JSON (what a model reads) and its structured content is the same object. The
status is the one ``api.errors.STATUS_OF_CODE`` gives the code, so a caller that knows the
HTTP API recognises every error. Arguments the tool's JSON Schema refuses are a
``validation-failed`` naming the argument as a JSON pointer. Nothing else reaches the
caller: an unexpected exception is logged and answered with a bare ``internal-error``.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.types import CallToolResult, TextContent
from pydantic import ValidationError

from orchestrator.api.errors import STATUS_OF_CODE
from orchestrator.domain.errors import DomainError, ValidationFailed

INTERNAL_ERROR = "internal-error"


def problem_document(
    code: str, title: str, detail: str, *, field: str | None = None
) -> dict[str, Any]:
    """The problem+json body the HTTP API would answer for this error."""
    body: dict[str, Any] = {
        "type": f"urn:orchestrator:problem:{code}",
        "title": title,
        "status": STATUS_OF_CODE.get(code, 500 if code == INTERNAL_ERROR else 400),
        "detail": detail,
        "code": code,
    }
    if field is not None:
        body["field"] = field
    return body


def error_result(document: dict[str, Any]) -> CallToolResult:
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=document, is_error=True
    )


def domain_error_result(exc: DomainError) -> CallToolResult:
    return error_result(problem_document(exc.code, exc.title, exc.detail, field=exc.field))


def _pointer(loc: tuple[int | str, ...]) -> str:
    return "/" + "/".join(str(part) for part in loc)


def arguments_error(exc: ValidationError, *, body: str | None = None) -> ValidationFailed:
    """The first argument the schema refused, as the API's 422 would name it: a JSON
    pointer to the argument, or, inside the ``body`` argument (an HTTP API request body),
    to the field as the API names it (``/runs/0/actor``)."""
    errors = exc.errors()
    if not errors:
        return ValidationFailed("the arguments are not valid", field="/")
    first = errors[0]
    loc = tuple(first.get("loc", ()))
    if body is not None and len(loc) > 1 and loc[0] == body:
        loc = loc[1:]
    pointer = _pointer(loc)
    return ValidationFailed(f"{pointer}: {first.get('msg', 'invalid')}", field=pointer)


def internal_error_result() -> CallToolResult:
    return error_result(
        problem_document(
            INTERNAL_ERROR,
            "Internal error",
            "the tool failed unexpectedly; try again, or report it if it persists",
        )
    )
