"""The OpenAPI document, adjusted so it states exactly what the running app enforces.

FastAPI generates the document from the routes and models; this adds what it cannot know:
the limits that come from settings (runs per request, input size, body size), every error
each operation can answer (from the one table below, as ``application/problem+json`` with
the ``Problem`` schema and the operation's possible ``code`` values), and the actors the
registry holds now (an operator can edit it without a restart, so that part is read again
for every document served). ``tests/contract`` holds the app to this document.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from sqlalchemy.exc import SQLAlchemyError

from orchestrator.api.deps import AppState
from orchestrator.api.errors import MALFORMED_BODY
from orchestrator.api.schemas import Problem
from orchestrator.config.settings import Settings
from orchestrator.db.queries.registry import list_actors
from orchestrator.domain.errors import NotFound, UnknownActor, ValidationFailed
from orchestrator.domain.spending import WorkspaceBudgetExhausted
from orchestrator.service.errors import (
    Forbidden,
    IdempotencyKeyReused,
    InputTooLarge,
    InvalidIdempotencyKey,
    PayloadTooLarge,
    PlanOutdated,
    PreconditionFailed,
    TooManyRuns,
    Unauthorized,
    UnsafeCallbackWebhook,
    WorkspaceRequired,
)

log = logging.getLogger(__name__)

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}

_STATUS_TEXT = {
    400: "Bad request",
    401: "Missing, invalid or revoked API key (on the webhook: its token)",
    402: "The workspace's spending limit for the period is spent; nothing was created",
    403: "The key may not do this (an admin key is required)",
    404: "Not found (or owned by another workspace)",
    409: "Conflict",
    412: "The entry is not at the version `If-Match` names",
    413: "Request body too large",
    422: "The request is not valid; `field` names the offending part",
    503: "The workflow engine is unavailable; nothing was created",
}

_UNAUTHORIZED: dict[int, tuple[str, ...]] = {401: (Unauthorized.code,)}
_NOT_FOUND: dict[int, tuple[str, ...]] = {404: (NotFound.code,)}
#: api.limits refuses an oversized body on any POST or DELETE, whether it takes a body or not.
_TOO_LARGE: dict[int, tuple[str, ...]] = {413: (PayloadTooLarge.code,)}
_INVALID: dict[int, tuple[str, ...]] = {422: (ValidationFailed.code,)}
#: A body FastAPI cannot even decode (not UTF-8, say) is its own 400 (errors.py names it).
_UNDECODABLE: dict[int, tuple[str, ...]] = {400: (MALFORMED_BODY,)}
_UNAVAILABLE: dict[int, tuple[str, ...]] = {503: ("unavailable",)}
_ADMIN: dict[int, tuple[str, ...]] = {**_UNAUTHORIZED, 403: (Forbidden.code,)}
_PRECONDITION: dict[int, tuple[str, ...]] = {412: (PreconditionFailed.code,)}

#: Every problem each operation can answer: status → the ``code`` values it carries. The
#: document's error responses come from this table only, and building the document fails
#: for an operation it does not list, so a new route cannot go undocumented.
PROBLEMS: dict[tuple[str, str], dict[int, tuple[str, ...]]] = {
    ("get", "/healthz"): {},  # its 503 is the health body, declared on the route
    ("post", "/runs"): {
        400: (
            MALFORMED_BODY,
            UnknownActor.code,
            UnsafeCallbackWebhook.code,
            InvalidIdempotencyKey.code,
        ),
        **_UNAUTHORIZED,
        402: (WorkspaceBudgetExhausted.code,),
        409: (PlanOutdated.code,),
        **_NOT_FOUND,
        **_TOO_LARGE,
        422: (
            ValidationFailed.code,
            TooManyRuns.code,
            InputTooLarge.code,
            IdempotencyKeyReused.code,
            WorkspaceRequired.code,
        ),
        **_UNAVAILABLE,
    },
    ("get", "/runs"): {**_UNAUTHORIZED, **_INVALID},
    ("get", "/runs/{run_id}"): {**_UNAUTHORIZED, **_NOT_FOUND},
    ("get", "/runs/{run_id}/items"): {**_UNAUTHORIZED, **_NOT_FOUND, **_INVALID},
    ("get", "/runs/{run_id}/events"): {**_UNAUTHORIZED, **_NOT_FOUND, **_INVALID},
    ("post", "/runs/{run_id}/abort"): {
        **_UNAUTHORIZED,
        **_NOT_FOUND,
        **_TOO_LARGE,
        **_UNAVAILABLE,
    },
    ("post", "/admin/keys"): {**_UNDECODABLE, **_ADMIN, **_TOO_LARGE, **_INVALID},
    ("get", "/admin/keys"): _ADMIN,
    ("delete", "/admin/keys/{key_id}"): {**_ADMIN, **_NOT_FOUND, **_TOO_LARGE},
    ("post", "/workspaces/{workspace_id}/callback-secret"): {
        **_UNAUTHORIZED,
        **_NOT_FOUND,
        **_TOO_LARGE,
    },
    ("get", "/workspaces/{workspace_id}/usage"): {**_UNAUTHORIZED, **_NOT_FOUND, **_INVALID},
    ("get", "/workspaces/{workspace_id}/budget"): {**_UNAUTHORIZED, **_NOT_FOUND},
    ("put", "/workspaces/{workspace_id}/budget"): {
        **_UNDECODABLE,
        **_ADMIN,
        **_NOT_FOUND,
        **_TOO_LARGE,
        **_INVALID,
    },
    ("delete", "/workspaces/{workspace_id}/budget"): {**_ADMIN, **_NOT_FOUND, **_TOO_LARGE},
    # Capacity admission: a workspace's concurrency limit.
    ("get", "/workspaces/{workspace_id}/concurrency"): {**_UNAUTHORIZED, **_NOT_FOUND},
    ("put", "/workspaces/{workspace_id}/concurrency"): {
        **_UNDECODABLE,
        **_ADMIN,
        **_NOT_FOUND,
        **_TOO_LARGE,
        **_INVALID,
    },
    ("delete", "/workspaces/{workspace_id}/concurrency"): {
        **_ADMIN,
        **_NOT_FOUND,
        **_TOO_LARGE,
    },
    ("post", "/plans"): {
        **_UNDECODABLE,
        **_UNAUTHORIZED,
        **_NOT_FOUND,
        **_TOO_LARGE,
        422: (ValidationFailed.code, WorkspaceRequired.code),
    },
    ("get", "/plans/{plan_id}"): {**_UNAUTHORIZED, **_NOT_FOUND},
    ("get", "/actors"): _UNAUTHORIZED,
    ("get", "/actors/{name}"): {**_UNAUTHORIZED, **_NOT_FOUND},
    ("put", "/admin/actors/{name}"): {
        **_UNDECODABLE,
        **_ADMIN,
        **_TOO_LARGE,
        **_PRECONDITION,
        **_INVALID,
    },
    ("delete", "/admin/actors/{name}"): {
        **_ADMIN,
        **_NOT_FOUND,
        **_TOO_LARGE,
        **_PRECONDITION,
    },
    ("get", "/admin/actors/{name}/history"): {**_ADMIN, **_NOT_FOUND},
    ("post", "/webhooks/platform"): {
        400: (MALFORMED_BODY,),
        401: ("unauthorized",),
        404: (NotFound.code,),
        409: ("run-mismatch",),
        413: (PayloadTooLarge.code,),
    },
}


def _problem_response(status: int, codes: tuple[str, ...]) -> dict[str, Any]:
    listed = ", ".join(f"`{c}`" for c in codes)
    schema = {"allOf": [PROBLEM_REF], "properties": {"code": {"enum": list(codes)}}}
    return {
        "description": f"{_STATUS_TEXT[status]}. Codes: {listed}.",
        "content": {"application/problem+json": {"schema": schema}},
    }


def _declare_problems(paths: dict[str, Any]) -> None:
    declared = set()
    for path, item in paths.items():
        for method, operation in item.items():
            problems = PROBLEMS.get((method, path))
            if problems is None:
                raise RuntimeError(f"{method.upper()} {path} is missing from openapi.PROBLEMS")
            declared.add((method, path))
            responses: dict[str, Any] = operation.setdefault("responses", {})
            # FastAPI adds a 422 to every operation with parameters; only the table knows.
            responses.pop("422", None)
            for status, codes in problems.items():
                responses[str(status)] = _problem_response(status, codes)
    if stale := set(PROBLEMS) - declared:
        raise RuntimeError(f"openapi.PROBLEMS lists operations that do not exist: {stale}")


#: What the live part of the document says of one actor: its name and hard caps.
_ActorRule = tuple[str, int | None, float | None]


def _registered_actors(app: FastAPI) -> tuple[_ActorRule, ...] | None:
    state: AppState | None = getattr(app.state, "orchestrator", None)
    if state is None:  # a document built outside a running app (no database)
        return None
    try:
        with state.reader.connect() as conn:
            return tuple(
                (name, entry.caps.max_items, entry.caps.max_total_charge_usd)
                for name, entry in list_actors(conn).items()
            )
    except SQLAlchemyError:  # the document is still served, without the live part
        log.warning("the actor registry could not be read for the OpenAPI document")
        return None


def _cap_rules(actors: tuple[_ActorRule, ...]) -> list[dict[str, Any]]:
    """One ``if actor is X then options stay under X's caps`` per capped actor."""
    rules = []
    for name, max_items, max_charge in actors:
        caps: dict[str, Any] = {}
        if max_items is not None:
            caps["maxItems"] = {"maximum": max_items}
        if max_charge is not None:
            caps["maxTotalChargeUsd"] = {"maximum": max_charge}
        if caps:
            rules.append(
                {
                    "if": {"properties": {"actor": {"const": name}}, "required": ["actor"]},
                    "then": {"properties": {"options": {"properties": caps}}},
                }
            )
    return rules


def _base_document(app: FastAPI, settings: Settings) -> dict[str, Any]:
    """The document FastAPI derives from the routes, with our limits and problem table."""
    schema = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
    )
    components: dict[str, Any] = schema.setdefault("components", {}).setdefault("schemas", {})
    request = components.get("CreateRunRequest")
    if request is not None:
        runs = request["properties"]["runs"]
        runs["maxItems"] = settings.max_runs_per_request
        runs["description"] = (
            f"The actor runs (at most {settings.max_runs_per_request} per request)."
        )
    actor_run = components.get("ActorRunRequest")
    if actor_run is not None:
        actor_input = actor_run["properties"]["input"]
        actor_input["x-max-bytes"] = settings.max_input_bytes
        actor_input["description"] = (
            f"The actor's input (at most {settings.max_input_bytes} bytes as compact JSON)."
        )
    source = components.get("InputSource")
    if source is not None:
        source["properties"]["max"]["anyOf"][0]["maximum"] = settings.max_step_input_values
        source["properties"]["max"]["description"] = (
            f"Most values taken (default and hard maximum: {settings.max_step_input_values})."
        )
    _declare_problems(schema.get("paths", {}))
    components["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    schema["info"]["x-limits"] = {
        "maxBodyBytes": settings.max_body_bytes,
        "maxRunsPerRequest": settings.max_runs_per_request,
        "maxInputBytes": settings.max_input_bytes,
        "maxStepInputValues": settings.max_step_input_values,
    }
    return schema


def install_openapi(app: FastAPI, settings: Settings) -> None:
    base: dict[str, Any] = {}
    served: dict[tuple[_ActorRule, ...] | None, dict[str, Any]] = {}

    def build() -> dict[str, Any]:
        if not base:
            base.update(_base_document(app, settings))
        actors = _registered_actors(app)
        if actors not in served:
            schema = copy.deepcopy(base)
            actor_run = schema["components"]["schemas"].get("ActorRunRequest")
            if actors and actor_run is not None:
                # The registry is the rule (an unknown actor is a 400); state it as an enum,
                # and each actor's hard caps on its options (above one is a 422).
                actor_run["properties"]["actor"]["enum"] = [name for name, _, _ in actors]
                if rules := _cap_rules(actors):
                    actor_run["allOf"] = rules
            served.clear()
            served[actors] = schema
        app.openapi_schema = served[actors]
        return served[actors]

    app.openapi = build  # type: ignore[method-assign]
