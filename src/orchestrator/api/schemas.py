"""Request and response bodies of the HTTP API (camelCase on the wire).

Limits that depend on settings (runs per request, input size) are enforced by the service
and written into the OpenAPI document by ``api.openapi``, so the document states what the
running app accepts. Run options are checked by the service against ``domain.run_options``;
their schema here only states those rules (from the same constants). ``to_command`` turns
a body into the service's command type, so nothing below the API sees this wire format.
"""

from __future__ import annotations

import types
from datetime import date, datetime
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from orchestrator.db.queries.registry import ActorEntry, JsonInt
from orchestrator.domain import run_options as rules
from orchestrator.domain.chaining import StepSource
from orchestrator.service.commands import ActorRun, SubmitRequest
from orchestrator.service.planning import PlanCommand

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$"


class ApiModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # Pydantic's lax mode reads `true` as 1 for int and float fields: a budget of `true`
        # would be a budget of $1. A number must be written as a number.
        if isinstance(value, bool) and info.field_name is not None:
            field = cls.model_fields.get(info.field_name)
            if field is not None and _is_number(field.annotation):
                raise ValueError("must be a number, not a boolean")
        return value


def _is_number(annotation: Any) -> bool:
    """Whether a field holds an int or a float (optional, or annotated, included)."""
    if annotation in (int, float):
        return True
    origin = get_origin(annotation)
    if origin is Annotated:
        return _is_number(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return bool(members) and all(_is_number(a) for a in members)
    return False


def _documented(schema: dict[str, Any]) -> WithJsonSchema:
    """The schema of a value the service validates (``domain.run_options``), for the docs."""
    return WithJsonSchema(schema)


class RunOptions(ApiModel):
    memory_mb: (
        Annotated[int, _documented({"type": "integer", "enum": list(rules.MEMORY_MB_CHOICES)})]
        | None
    ) = Field(
        default=None,
        description=f"Memory of the platform run: a power of 2 from {rules.MEMORY_MB_MIN} to "
        f"{rules.MEMORY_MB_MAX} MB.",
    )
    timeout_sec: (
        Annotated[
            int,
            _documented(
                {
                    "type": "integer",
                    "minimum": rules.TIMEOUT_SEC_MIN,
                    "maximum": rules.TIMEOUT_SEC_MAX,
                }
            ),
        ]
        | None
    ) = None
    build: (
        Annotated[str, _documented({"type": "string", "maxLength": rules.BUILD_MAX_LENGTH})] | None
    ) = None
    max_items: (
        Annotated[int, _documented({"type": "integer", "minimum": rules.MAX_ITEMS_MIN})] | None
    ) = Field(
        default=None,
        description="Most dataset items the run is charged for (Apify's `maxItems`); at most "
        "the actor's hard cap, which applies when this is left out.",
    )
    max_total_charge_usd: (
        Annotated[float, _documented({"type": "number", "exclusiveMinimum": 0})] | None
    ) = Field(
        default=None,
        description="Most the platform may charge for the run, in USD (Apify's "
        "`maxTotalChargeUsd`); at most the actor's hard cap, which applies when this is left out, "
        "and at least the actor's minimum charge (docs/API.md, Minimum charge).",
    )

    def to_options(self) -> rules.RunOptions:
        return rules.RunOptions(
            memory_mb=self.memory_mb,
            timeout_sec=self.timeout_sec,
            build=self.build,
            max_items=self.max_items,
            max_total_charge_usd=self.max_total_charge_usd,
        )


class InputSource(ApiModel):
    """Where one input field of a chained run comes from (docs/API.md, Chained runs)."""

    run: int = Field(
        ge=0,
        description="Index of an earlier run of the same request whose rows give the values.",
    )
    field: str = Field(
        min_length=1,
        max_length=256,
        pattern=r"^[^.]+(\.[^.]+)*$",
        description="The rows' field: a top-level name or a dotted path (`company.domain`). "
        "Missing and null values are dropped; an array's elements are each a value.",
    )
    distinct: StrictBool = Field(
        default=True, description="Keep each value once (first occurrence order)."
    )
    max: int | None = Field(
        default=None,
        ge=1,
        description="Most values taken (default and hard maximum: `maxStepInputValues`).",
    )

    def to_source(self) -> StepSource:
        return StepSource(run=self.run, field=self.field, distinct=self.distinct, max=self.max)

    @classmethod
    def of(cls, stored: dict[str, Any]) -> InputSource:
        source = StepSource.from_stored(stored)
        return cls(run=source.run, field=source.field, distinct=source.distinct, max=source.max)


class ActorRunRequest(ApiModel):
    actor: str = Field(
        min_length=1, max_length=128, description="Logical actor name from the actor registry."
    )
    input: dict[str, Any] = Field(
        default_factory=dict,
        description="The actor's input (at most `maxInputBytes` bytes as compact JSON).",
    )
    options: RunOptions = Field(default_factory=RunOptions)
    input_from: dict[Annotated[str, Field(min_length=1)], InputSource] | None = Field(
        default=None,
        description="Chained run: input fields built from an earlier run's rows, by field "
        "name; each becomes a JSON array. The run starts once those runs have ended and "
        "their rows are stored; it is `skipped` when a field comes out empty. A field may "
        "not be both here and in `input`.",
    )

    def to_run(self) -> ActorRun:
        return ActorRun(
            actor=self.actor,
            input=self.input,
            options=self.options.to_options(),
            input_from={name: s.to_source() for name, s in self.input_from.items()}
            if self.input_from
            else None,
        )


class DeliverOptions(ApiModel):
    rows: Literal["none", "callback"] = Field(
        default="none",
        description="`callback`: as each actor run ends, its rows are POSTed to "
        "`callbackWebhook` in signed NDJSON batches (before the final summary callback); "
        'requires `callbackWebhook`. See docs/API.md, "Rows pushed to the callback".',
    )


#: A capability name (``leads``, ``web-traffic``), as the catalog spells them.
NEED_PATTERN = r"^[a-z][a-z0-9-]*$"
PLAN_ID_PATTERN = r"^plan_[0-9a-z]{20}$"


class PlanLimits(ApiModel):
    max_items_per_step: int | None = Field(
        default=None, ge=1, description="Each step's `maxItems`: at most this many rows."
    )


_Needs = list[Annotated[str, Field(pattern=NEED_PATTERN, max_length=64)]]
_NEEDS_DOC = 'The capabilities wanted, e.g. `["leads", "web-traffic"]` (`GET /actors` lists them).'
_BRIEF_DOC = "The specification's brief object (what is wanted, e.g. `targetCount`)."
_ICP_DOC = "The ideal customer profile (industries, titles, regions, company size)."


def _limits(limits: PlanLimits | None) -> dict[str, Any]:
    return limits.model_dump(by_alias=True, exclude_none=True) if limits else {}


class PlanRequest(ApiModel):
    workspace_id: str | None = Field(
        default=None, pattern=ID_PATTERN, description="Required with an admin key."
    )
    needs: _Needs = Field(min_length=1, max_length=10, description=_NEEDS_DOC)
    brief: dict[str, Any] = Field(description=_BRIEF_DOC)
    icp: dict[str, Any] = Field(default_factory=dict, description=_ICP_DOC)
    limits: PlanLimits | None = None
    budget_usd: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="The budget the plan must fit."
    )

    def to_command(self) -> PlanCommand:
        return PlanCommand(
            needs=tuple(self.needs),
            brief=self.brief,
            icp=self.icp,
            limits=_limits(self.limits),
            budget_usd=self.budget_usd,
            workspace_id=self.workspace_id,
        )

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "workspaceId": "ws_demo",
                    "needs": ["leads", "web-traffic"],
                    "brief": {"product": "B2B payroll software", "targetCount": 25},
                    "icp": {"titles": ["HR Director"], "regions": ["Europe"]},
                    "budgetUsd": 2,
                }
            ]
        },
    )


class PlanStepView(ApiModel):
    index: int
    need: str
    actor: str
    input: dict[str, Any]
    input_from: dict[str, InputSource] = Field(
        description="Input fields taken from an earlier step's rows."
    )
    depends_on: list[int]
    expected_rows: int
    estimated_cost_usd: float
    minimum_charge_usd: float
    why: str = Field(description="Why this actor was chosen for the need.")
    rejected: list[str] = Field(description="The other candidates, and why not them.")


class PlanView(ApiModel):
    plan_id: str
    workspace_id: str
    catalog_version: int = Field(description="The catalog version it was planned against.")
    created_at: datetime
    strategy: str
    needs: list[str]
    expected_rows: int
    estimated_cost_usd: float = Field(
        description="What the steps should be charged for the expected rows (platform usage "
        "of free actors is not included; see `notes`)."
    )
    minimum_charge_usd: float
    budget_usd: float | None
    notes: list[str]
    steps: list[PlanStepView]


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
    runs: list[ActorRunRequest] | None = Field(
        default=None,
        min_length=1,
        description="The actor runs (at most `maxRunsPerRequest`). Or give `planId` (a plan "
        "from `POST /plans`), or `brief` with `needs` (planned now).",
    )
    plan_id: str | None = Field(
        default=None, pattern=PLAN_ID_PATTERN, description="Run a plan from `POST /plans`."
    )
    needs: _Needs | None = Field(default=None, min_length=1, max_length=10, description=_NEEDS_DOC)
    brief: dict[str, Any] | None = Field(default=None, description=_BRIEF_DOC)
    icp: dict[str, Any] | None = Field(default=None, description=_ICP_DOC)
    limits: PlanLimits | None = None
    keep_partial_rows: StrictBool = Field(
        default=True,
        description="Keep the rows of actor runs that fail, time out or are aborted: their "
        "datasets are ingested before they end (`partial: true` on such a child).",
    )
    budget_usd: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Most the whole request may be charged, in USD. Split across the runs "
        "before they start: each run's `maxTotalChargeUsd` is at most its share (runs whose "
        "own limit is below the equal share keep it; the rest is shared equally; no run gets "
        "less than its actor's minimum charge), rounded down to 6 decimals. Smaller than the "
        "runs' minimum charges added up is a 422.",
    )
    deliver: DeliverOptions | None = Field(
        default=None, description="How the rows reach the caller besides `GET /runs/{id}/items`."
    )

    @model_validator(mode="after")
    def _one_way_to_say_what_to_run(self) -> CreateRunRequest:
        ways = [self.runs is not None, self.plan_id is not None, self.needs is not None]
        if sum(ways) != 1:
            raise ValueError("give exactly one of `runs`, `planId`, or `needs` with `brief`")
        if (self.needs is not None) != (self.brief is not None):
            raise ValueError("`needs` and `brief` go together")
        if self.runs is not None and (self.icp is not None or self.limits is not None):
            raise ValueError("`icp` and `limits` go with `needs` and `brief`")
        return self

    def plan_command(self) -> PlanCommand:
        """The brief to plan (``needs`` and ``brief`` given)."""
        return PlanCommand(
            needs=tuple(self.needs or ()),
            brief=self.brief or {},
            icp=self.icp or {},
            limits=_limits(self.limits),
            budget_usd=self.budget_usd,
            workspace_id=self.workspace_id,
        )

    def to_command(self) -> SubmitRequest:
        return SubmitRequest(
            runs=tuple(r.to_run() for r in self.runs or ()),
            workspace_id=self.workspace_id,
            conversation_id=self.conversation_id,
            skill_id=self.skill_id,
            callback_webhook=self.callback_webhook,
            keep_partial_rows=self.keep_partial_rows,
            budget_usd=self.budget_usd,
            deliver_rows=self.deliver.rows if self.deliver is not None else "none",
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
                            "input": {
                                "brief": {"product": "B2B payroll software", "targetCount": 25},
                                "icp": {"titles": ["HR Director"], "regions": ["Europe"]},
                            },
                            "options": {"memoryMb": 1024, "timeoutSec": 1800},
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
    partial: bool = Field(
        default=False,
        description="It kept rows (`itemsIngested`) although it did not succeed.",
    )
    queue_position: int | None = Field(
        default=None,
        description="`queued` only: its place among the actor runs waiting for a platform "
        "slot (1 = next), in the fair order they are admitted; absent when unknown.",
    )
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    platform_calls: dict[str, int] = Field(
        default_factory=dict,
        description="Platform API calls made for this actor run, by kind "
        "(start, lookup, status, datasetPage, abort); the HTTP client's own retries count once.",
    )
    usage_total_usd: float | None = Field(
        default=None,
        description="What this platform run cost (the platform's usageTotalUsd), the highest "
        "figure read so far; null before a read had one. Final once `usageSettled`.",
    )
    charged_event_counts: dict[str, int] = Field(
        default_factory=dict,
        description="Events charged by a pay-per-event actor, by event name.",
    )
    usage_settled: bool = Field(
        default=False,
        description="The figures were read again after the run ended until they stopped "
        "changing: they are final.",
    )
    input_from: dict[str, InputSource] | None = Field(
        default=None,
        description="Chained run: where its input fields come from (`max` resolved); null "
        "for a run whose input was complete.",
    )
    input_built: dict[str, int] | None = Field(
        default=None,
        description="Chained run, once its input was built from the earlier runs' rows: "
        "how many values each field got. Null before (and for a `skipped` run).",
    )


class RunCounts(ApiModel):
    total: int
    succeeded: int
    failed: int
    running: int
    skipped: int = Field(
        default=0, description="Chained runs skipped because their input came out empty."
    )


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
    usage_total_usd: float = Field(
        default=0.0, description="What the request has cost: the sum of its children's figures."
    )
    usage_settled: bool = Field(
        default=False,
        description="Every child that reached the platform has a settled (final) figure.",
    )
    budget_usd: float | None = Field(
        default=None,
        description="The request's budget (USD) as submitted; null without one. Each run was "
        "started with its share as `maxTotalChargeUsd`.",
    )
    stop_reason: str | None = Field(
        default=None,
        description="Why the request was stopped before its runs ended by themselves: "
        "`budget-exhausted` (its `budgetUsd` or its workspace's limit was spent; every run "
        "still live was aborted, rows kept); null otherwise. A caller's abort shows as "
        "`state: aborted`.",
    )
    stop_message: str | None = Field(
        default=None, description="Which budget stopped it, and what was spent."
    )
    children: list[ChildView]
    keep_partial_rows: bool = True
    plan_id: str | None = Field(default=None, description="The plan the request was made from.")
    plan: PlanView | None = Field(
        default=None,
        description="That plan: its steps are the children, in order (step N is child N).",
    )
    catalog_version: int | None = Field(
        default=None,
        description="The actor catalog version the request's inputs were validated against "
        "(`GET /actors`); null for requests from before the catalog was versioned.",
    )
    deliver: DeliverOptions = Field(
        default_factory=DeliverOptions, description="How the rows reach the caller."
    )


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


class ActorUsageView(ApiModel):
    actor: str
    usage_total_usd: float
    runs: int = Field(description="Platform runs of this actor booked on this day.")
    unsettled: int = Field(description="Of those, runs whose figure is not final yet.")
    charged_event_counts: dict[str, int]


class DayUsageView(ApiModel):
    day: date = Field(description="UTC day on which the runs finished (or started, if running).")
    usage_total_usd: float
    actors: list[ActorUsageView]


class WorkspaceUsageView(ApiModel):
    workspace_id: str
    from_: date = Field(alias="from")
    to: date
    usage_total_usd: float
    days: list[DayUsageView] = Field(description="Days with any spend, oldest first.")


class WorkspaceBudgetRequest(ApiModel):
    limit_usd: float = Field(
        gt=0, description="The most the workspace may spend per period (USD).", examples=[50]
    )
    period: Literal["day", "month"] = Field(
        default="month", description="UTC calendar day or month; a new period starts afresh."
    )


class WorkspaceBudgetView(ApiModel):
    workspace_id: str
    limit_usd: float | None = Field(description="Null: the workspace has no limit.")
    period: Literal["day", "month"] | None
    period_start: datetime | None = Field(description="The current period (UTC), inclusive.")
    period_end: datetime | None = Field(description="When the next period starts.")
    spent_usd: float | None = Field(
        description="Spend booked in the current period (as the usage report books it)."
    )
    remaining_usd: float | None
    exhausted: bool = Field(
        description="The limit is spent: new requests are refused (402) and running ones "
        "are stopped (`stopReason: budget-exhausted`)."
    )


class RotatedSecret(ApiModel):
    workspace_id: str
    callback_secret: str = Field(description="The new whsec_ secret. Shown once.")
    rotated_at: datetime
    previous_valid_until: datetime | None = Field(
        description="Until then callbacks carry a second signature made with the old secret."
    )


# --- the actor catalog (GET /actors, /admin/actors) ----------------------------------------


class ActorView(ActorEntry):
    """A catalog entry as listed: the whole entry, its name and its version."""

    name: str = Field(description="The logical actor name requests use in `runs[].actor`.")
    version: int = Field(
        description="The catalog version of this entry's latest change (its `ETag`)."
    )


class CatalogView(ApiModel):
    version: int = Field(description="The catalog version: one more with every change.")
    actors: list[ActorView]


class CatalogChangeView(ApiModel):
    version: int = Field(description="The catalog version this change made.")
    actor: str
    change: Literal["created", "replaced", "deleted"]
    entry: dict[str, Any] | None = Field(
        description="The entry after the change (as stored then); null for a deletion."
    )
    changed_by: str = Field(
        description="Who made it: `key:<API key id>`, `seed` (the registry file at start-up) "
        "or `migration` (entries that predate the change log)."
    )
    changed_at: datetime


class CatalogHistoryView(ApiModel):
    actor: str
    changes: list[CatalogChangeView] = Field(description="Every change, oldest first.")


# -- capacity admission: per-workspace concurrency limits (docs/API.md) ----------------------
class WorkspaceConcurrencyRequest(ApiModel):
    max_concurrent_runs: JsonInt = Field(
        # An integer as JSON Schema means it: 2.0 is 2, but true/false are not 1/0.
        strict=True,
        ge=0,
        le=100_000,
        description="Most platform runs the workspace's requests may hold at once (0: none "
        "start until it is raised); the account's own limits apply as well.",
        examples=[4],
    )


class WorkspaceConcurrencyView(ApiModel):
    workspace_id: str
    max_concurrent_runs: int | None = Field(description="Null: the workspace has no limit.")
