"""Request and response bodies of the HTTP API (camelCase on the wire)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

MAX_RUNS_PER_REQUEST = 200
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
    input: dict[str, Any] = Field(default_factory=dict, description="The actor's input.")
    options: RunOptions = Field(default_factory=RunOptions)


class CreateRunRequest(ApiModel):
    workspace_id: str = Field(pattern=ID_PATTERN)
    conversation_id: str | None = Field(default=None, pattern=ID_PATTERN)
    skill_id: str | None = Field(
        default=None, pattern=ID_PATTERN, description="The skill run this request belongs to."
    )
    callback_webhook: str | None = Field(default=None, max_length=2048)
    runs: list[ActorRunRequest] = Field(min_length=1, max_length=MAX_RUNS_PER_REQUEST)

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "workspaceId": "ws_demo",
                    "skillId": "skill_run_42",
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


class ItemView(ApiModel):
    id: int
    child_id: str
    item_index: int
    actor: str
    data: Any


class ItemPage(ApiModel):
    items: list[ItemView]
    next_cursor: str | None


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
