"""Request and response bodies of the HTTP API (camelCase on the wire).

Limits that depend on settings (runs per request, input size) are enforced by the service
and written into the OpenAPI document by ``api.openapi``, so the document states what the
running app accepts.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$"


class ApiModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class RunOptions(ApiModel):
    memory_mb: int | None = Field(
        default=None, ge=128, le=32768, description="Memory of the platform run, a power of 2."
    )
    timeout_sec: int | None = Field(default=None, ge=1, le=7 * 24 * 3600)
    build: str | None = Field(default=None, max_length=64)
    max_items: int | None = Field(default=None, ge=1)

    def merged_with(self, defaults: dict[str, Any]) -> dict[str, Any]:
        """These options over the registry's defaults, in wire (camelCase) form."""
        merged = {k: v for k, v in defaults.items() if v is not None}
        merged.update(self.model_dump(by_alias=True, exclude_none=True))
        return merged


class ActorRunRequest(ApiModel):
    actor: str = Field(
        min_length=1, max_length=128, description="Logical actor name from the actor registry."
    )
    input: dict[str, Any] = Field(
        default_factory=dict,
        description="The actor's input (at most `maxInputBytes` bytes as compact JSON).",
    )
    options: RunOptions = Field(default_factory=RunOptions)


class CreateRunRequest(ApiModel):
    workspace_id: str | None = Field(
        default=None,
        pattern=ID_PATTERN,
        description="The workspace. Optional with a workspace key (it must then be the key's "
        "own workspace); required with an admin key.",
    )
    conversation_id: str | None = Field(default=None, pattern=ID_PATTERN)
    skill_id: str | None = Field(
        default=None, pattern=ID_PATTERN, description="The skill run this request belongs to."
    )
    callback_webhook: str | None = Field(
        default=None,
        max_length=2048,
        description="https URL on a public host, POSTed a signed summary (Standard Webhooks) "
        "when the request ends. No credentials, no private/loopback/link-local addresses; "
        "redirects are not followed.",
    )
    runs: list[ActorRunRequest] = Field(
        min_length=1, description="The actor runs (at most `maxRunsPerRequest`)."
    )

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "workspaceId": "ws_demo",
                    "skillId": "skill_run_42",
                    "conversationId": "conv_7",
                    "callbackWebhook": "https://skills.example.com/hooks/scrapes",
                    "runs": [
                        {
                            "actor": "ultron-leadgen",
                            "input": {"brief": "B2B payroll software", "icp": "HR leads"},
                            "options": {"memoryMb": 1024, "timeoutSec": 600},
                        },
                        {
                            "actor": "ultron-similarweb-bulk",
                            "input": {"domains": ["example.com", "example.org"]},
                        },
                    ],
                }
            ]
        },
    )


class CreateRunResponse(ApiModel):
    run_id: str
    state: str
    status_url: str
    items_url: str
    events_url: str

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        json_schema_extra={
            "examples": [
                {
                    "runId": "run_5h8k2m4n6p8r0t2v4x6z",
                    "state": "queued",
                    "statusUrl": "/runs/run_5h8k2m4n6p8r0t2v4x6z",
                    "itemsUrl": "/runs/run_5h8k2m4n6p8r0t2v4x6z/items",
                    "eventsUrl": "/runs/run_5h8k2m4n6p8r0t2v4x6z/events",
                }
            ]
        },
    )


class AbortResponse(ApiModel):
    run_id: str
    state: str
    aborting: bool
    detail: str


class ChildView(ApiModel):
    id: str
    index: int
    actor: str
    platform_actor_id: str
    platform_run_id: str | None
    dataset_id: str | None
    state: str
    terminal: bool
    platform_status: str | None
    status_message: str | None
    items_ingested: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    platform_calls: dict[str, int] = Field(
        default_factory=dict,
        description="Platform API calls made for this actor run, by kind "
        "(start, lookup, status, datasetPage, abort); the HTTP client's own retries count once.",
    )


class RunCounts(ApiModel):
    total: int
    succeeded: int
    failed: int
    running: int


class RunView(ApiModel):
    id: str
    workspace_id: str
    conversation_id: str | None
    skill_id: str | None
    state: str
    terminal: bool
    counts: RunCounts
    items_total: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    children: list[ChildView]


class RunSummary(ApiModel):
    id: str
    workspace_id: str
    conversation_id: str | None
    skill_id: str | None
    state: str
    terminal: bool
    children_total: int
    created_at: datetime
    finished_at: datetime | None


class RunList(ApiModel):
    runs: list[RunSummary]
    next_cursor: str | None = Field(
        default=None, description="Pass as `cursor` for the next (older) page; null at the end."
    )


class ItemView(ApiModel):
    id: int
    run_id: str
    child_id: str
    item_index: int
    workspace_id: str
    skill_id: str | None
    conversation_id: str | None
    actor: str
    data: Any = Field(description="The row exactly as the actor produced it.")


class ItemPage(ApiModel):
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page. Null only when the request has ended "
        "and every row has been returned; while it runs, the cursor also picks up rows "
        "ingested later."
    )
    items: list[ItemView]

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        json_schema_extra={
            "examples": [
                {
                    "nextCursor": "eyJvIjp7IjAiOjEsIjEiOjB9fQ",
                    "items": [
                        {
                            "id": 1,
                            "runId": "run_5h8k2m4n6p8r0t2v4x6z",
                            "childId": "run_5h8k2m4n6p8r0t2v4x6z.0",
                            "itemIndex": 0,
                            "workspaceId": "ws_demo",
                            "skillId": "skill_run_42",
                            "conversationId": "conv_7",
                            "actor": "ultron-leadgen",
                            "data": {"name": "Ada Example", "title": "HR director"},
                        }
                    ],
                }
            ]
        },
    )


class EventView(ApiModel):
    id: int
    child_id: str | None
    kind: str
    message: str
    data: dict[str, Any] | None
    created_at: datetime


class EventPage(ApiModel):
    events: list[EventView]
    next_cursor: str | None


class Problem(BaseModel):
    """An RFC 9457 problem (``application/problem+json``) with a stable ``code``."""

    type: str = Field(description="urn:orchestrator:problem:<code>")
    title: str
    status: int
    detail: str
    code: str = Field(description="Stable machine-readable error code.")
    field: str | None = Field(
        default=None,
        description="The offending part: a JSON pointer into the body, or a parameter name.",
    )
    errors: list[dict[str, Any]] | None = None

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "type": "urn:orchestrator:problem:unsafe-callback-url",
                    "title": "Callback URL is not allowed",
                    "status": 400,
                    "detail": "callbackWebhook is not allowed: URL scheme must be https",
                    "code": "unsafe-callback-url",
                    "field": "/callbackWebhook",
                }
            ]
        }
    )


class CreateKeyRequest(ApiModel):
    workspace_id: str | None = Field(
        default=None,
        pattern=ID_PATTERN,
        description="The workspace the key is scoped to; omit (null) for an admin key.",
    )
    name: str = Field(default="", max_length=128, description="A label for people.")

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        json_schema_extra={"examples": [{"workspaceId": "ws_demo", "name": "research skill"}]},
    )


class KeyView(ApiModel):
    key_id: str
    display: str = Field(description="How the key looks with its secret part elided.")
    workspace_id: str | None
    admin: bool
    name: str
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None


class CreatedKey(KeyView):
    api_key: str = Field(description="The key itself. Shown once: only its hash is stored.")
    callback_secret: str | None = Field(
        default=None,
        description="The workspace's callback signing secret (whsec_…), only when this call "
        "created the workspace. Shown once; rotate it to get a new one.",
    )


class KeyList(ApiModel):
    keys: list[KeyView]


class RotatedSecret(ApiModel):
    workspace_id: str
    callback_secret: str = Field(description="The new whsec_ secret. Shown once.")
    rotated_at: datetime
    previous_valid_until: datetime | None = Field(
        description="Until then callbacks carry a second signature made with the old secret."
    )
