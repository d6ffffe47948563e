"""Domain error types, mapped to problem+json responses by the API's single error path.

Each carries a stable ``code``, a human ``title``, a ``detail`` and the offending ``field``;
the HTTP status of each code is the API's business (``api.errors``), not the domain's.
"""

from __future__ import annotations


class DomainError(Exception):
    """Base of errors a caller can act on. ``code`` is stable."""

    code = "error"
    title = "Bad request"

    def __init__(self, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field


class ValidationFailed(DomainError):
    code = "validation-failed"
    title = "The request is not valid"


class InvalidRunOption(ValidationFailed):
    """A run option the platform would refuse (or one outside our own documented bounds)."""


class OptionAboveCap(ValidationFailed):
    """A run option above the hard cap its actor's registry entry sets."""


class UnknownActor(DomainError):
    code = "unknown-actor"
    title = "Actor is not registered"


class NotFound(DomainError):
    code = "not-found"
    title = "Not found"
