"""The service's own command types: what a use case is asked to do, free of HTTP and aliases.

Routes translate request bodies into these (``api.schemas``) and the CLI or tests build them
directly, so nothing below the API depends on its wire format.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.domain.chaining import StepSource
from orchestrator.domain.run_options import RunOptions


@dataclass(frozen=True)
class ActorRun:
    """One actor run of a request: a logical actor name from the registry, its input."""

    actor: str
    input: dict[str, Any] = field(default_factory=dict)
    options: RunOptions = field(default_factory=RunOptions)
    #: Chained run: input fields built from earlier runs' rows (domain.chaining).
    input_from: dict[str, StepSource] | None = None


@dataclass(frozen=True)
class PlanToStore:
    """A plan made for this request (a brief in ``POST /runs``), stored with it in one
    transaction (``service.planning``)."""

    id: str
    workspace_id: str
    catalog_version: int
    strategy: str
    brief: dict[str, Any]
    document: dict[str, Any]


@dataclass(frozen=True)
class SubmitRequest:
    """Submit a request: spawn every actor run, ingest every row, tell the callback."""

    runs: tuple[ActorRun, ...]
    #: The workspace asked for; a workspace key may omit it (its own is used).
    workspace_id: str | None = None
    conversation_id: str | None = None
    skill_id: str | None = None
    callback_webhook: str | None = None
    #: Children that fail, time out or are aborted still have their rows ingested.
    keep_partial_rows: bool = True
    #: Most the whole request may be charged (USD), split across its runs (domain.budget).
    budget_usd: float | None = None
    #: ``callback``: push each child's rows to ``callback_webhook`` in signed NDJSON batches.
    deliver_rows: str = "none"
    #: The plan the runs come from (``service.planning``), if any; ``new_plan`` when it is
    #: made for this request and stored with it.
    plan_id: str | None = None
    new_plan: PlanToStore | None = None


#: Reads the body, or returns None as soon as it is known to exceed the given byte count.
BodyReader = Callable[[int], Awaitable[bytes | None]]


@dataclass(frozen=True)
class PlatformWebhook:
    """A webhook delivery from the platform, as received (nothing in it is trusted yet)."""

    child_id: str
    token: str
    dispatch_id: str
    #: Called only once the token is verified, so an unauthenticated body is never read.
    read_body: BodyReader
