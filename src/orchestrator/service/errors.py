"""Errors of the API's use cases, on top of ``domain.errors`` (same single error path).

Each has a stable ``code`` and an HTTP ``status``; ``headers`` are added to the problem
response (``WWW-Authenticate`` on 401, for instance). Details never quote secrets or
another workspace's identifiers.
"""

from __future__ import annotations

from orchestrator.domain.errors import DomainError


class Unauthorized(DomainError):
    code = "unauthorized"
    status = 401
    title = "Missing or invalid API key"
    headers = {"WWW-Authenticate": 'Bearer realm="orchestrator"'}


class Forbidden(DomainError):
    code = "forbidden"
    status = 403
    title = "This key may not do that"


class UnsafeCallbackWebhook(DomainError):
    code = "unsafe-callback-url"
    status = 400
    title = "Callback URL is not allowed"


class TooManyRuns(DomainError):
    code = "too-many-runs"
    status = 422
    title = "Too many actor runs in one request"


class InputTooLarge(DomainError):
    code = "input-too-large"
    status = 422
    title = "Actor input is too large"


class PayloadTooLarge(DomainError):
    code = "payload-too-large"
    status = 413
    title = "Request body is too large"


class IdempotencyKeyReused(DomainError):
    code = "idempotency-key-reused"
    status = 422
    title = "Idempotency-Key was used with a different request"


class InvalidIdempotencyKey(DomainError):
    code = "invalid-idempotency-key"
    status = 400
    title = "Idempotency-Key is malformed"


class WorkspaceRequired(DomainError):
    code = "workspace-required"
    status = 422
    title = "workspaceId is required with an admin key"
