"""Domain error types, mapped to problem+json responses by the API's single error path."""

from __future__ import annotations


class DomainError(Exception):
    """Base of errors a caller can act on. ``code`` is stable; ``status`` is the HTTP status."""

    code = "error"
    status = 400
    title = "Bad request"

    def __init__(self, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field


class ValidationFailed(DomainError):
    code = "validation-failed"
    status = 422
    title = "The request is not valid"


class UnknownActor(DomainError):
    code = "unknown-actor"
    status = 400
    title = "Actor is not registered"


class NotFound(DomainError):
    code = "not-found"
    status = 404
    title = "Not found"


class Conflict(DomainError):
    code = "conflict"
    status = 409
    title = "Conflict"
