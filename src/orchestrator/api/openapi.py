"""The OpenAPI document, adjusted so it states exactly what the running app enforces.

FastAPI generates the document from the routes and models; this adds what it cannot know:
the limits that come from settings (runs per request, input size, body size), that every
error is ``application/problem+json`` with the ``Problem`` schema (including 422s, which
FastAPI would describe with its own ``HTTPValidationError``), and the list of error codes.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from orchestrator.config.settings import Settings

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}


def install_openapi(app: FastAPI, settings: Settings) -> None:
    def build() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
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
        for path in schema.get("paths", {}).values():
            for operation in path.values():
                for status, response in operation.get("responses", {}).items():
                    if not str(status).isdigit() or int(status) < 400:
                        continue
                    response["content"] = {"application/problem+json": {"schema": PROBLEM_REF}}
        for unused in ("HTTPValidationError", "ValidationError"):
            components.pop(unused, None)
        schema["info"]["x-limits"] = {
            "maxBodyBytes": settings.max_body_bytes,
            "maxRunsPerRequest": settings.max_runs_per_request,
            "maxInputBytes": settings.max_input_bytes,
        }
        app.openapi_schema = schema
        return schema

    app.openapi = build  # type: ignore[method-assign]
