"""Errors of the API's use cases, on top of ``domain.errors`` (same single error path).

Each has a stable ``code``; ``api.errors`` maps codes to HTTP statuses (and adds
``WWW-Authenticate`` to a missing or bad API key). Details never quote secrets or another
workspace's identifiers.
"""

from __future__ import annotations

from orchestrator.domain.errors import DomainError


class Unauthorized(DomainError):
    code = "unauthorized"
    title = "Missing or invalid API key"


class Forbidden(DomainError):
    code = "forbidden"
    title = "This key may not do that"


class UnsafeCallbackWebhook(DomainError):
    code = "unsafe-callback-url"
    title = "Callback URL is not allowed"


class TooManyRuns(DomainError):
    code = "too-many-runs"
    title = "Too many actor runs in one request"


class InputTooLarge(DomainError):
    code = "input-too-large"
    title = "Actor input is too large"


class PayloadTooLarge(DomainError):
    code = "payload-too-large"
    title = "Request body is too large"


class IdempotencyKeyReused(DomainError):
    code = "idempotency-key-reused"
    title = "Idempotency-Key was used with a different request"


class InvalidIdempotencyKey(DomainError):
    code = "invalid-idempotency-key"
    title = "Idempotency-Key is malformed"


class WorkspaceRequired(DomainError):
    code = "workspace-required"
    title = "workspaceId is required with an admin key"


class EngineUnavailable(DomainError):
    """Temporal is not connected (or refused a start); nothing was created."""

    code = "unavailable"
    title = "Workflow engine unavailable"


class WorkflowStartFailed(EngineUnavailable):
    """Temporal did not accept the workflow; the request was rolled back."""


class WebhookUnauthorized(DomainError):
    """A platform webhook without a valid token (no API-key challenge: it is not one)."""

    code = "unauthorized"
    title = "Unauthorized"


class MalformedBody(DomainError):
    code = "malformed-body"
    title = "Malformed body"


class RunMismatch(DomainError):
    code = "run-mismatch"
    title = "Webhook for another run"


class PreconditionFailed(DomainError):
    """An ``If-Match`` that does not match the actor catalog entry's version."""

    code = "precondition-failed"
    title = "The entry is not at the version the request expects"


class PlanOutdated(DomainError):
    """A stored plan whose catalog version is no longer the catalog's (plan it again)."""

    code = "plan-outdated"
    title = "The plan was made with an older actor catalog"
