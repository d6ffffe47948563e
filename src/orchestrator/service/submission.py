"""Submitting a request: validate, store it, start its workflow - or replay an earlier one.

Everything is checked before anything is written (limits, the callback URL, every actor
against the registry, the Idempotency-Key), and the header, its children and its workspace
row are written in one transaction, so a rejected request leaves nothing behind. The
workflow id is derived from the run id, so starting it again (a retried call) finds the
same execution.

Idempotency (draft-ietf-httpapi-idempotency-key-header): the key is stored on the header,
unique per workspace, with a SHA-256 of the normalised request. The same key with the same
request answers with the original run and spawns nothing; with a different request it is a
422. Keys live as long as their run (no expiry). A concurrent duplicate loses the unique
constraint race and is answered as a replay.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import dataclass

from sqlalchemy import Engine, delete
from sqlalchemy.exc import IntegrityError
from temporalio.client import Client

from orchestrator.api.schemas import CreateRunRequest
from orchestrator.db.engine import read_only
from orchestrator.db.queries import registry
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.queries import workspaces as workspace_queries
from orchestrator.db.schema import scrape_children, scrape_events, scrape_runs
from orchestrator.delivery.url_guard import UnsafeCallbackUrl, check_callback_url
from orchestrator.domain.errors import UnknownActor
from orchestrator.domain.ids import child_id, new_run_id
from orchestrator.security.callback_secrets import new_nonce
from orchestrator.service.errors import (
    IdempotencyKeyReused,
    InputTooLarge,
    TooManyRuns,
    UnsafeCallbackWebhook,
    WorkspaceRequired,
)
from orchestrator.service.launch import start_request_workflow

log = logging.getLogger(__name__)


class WorkflowStartFailed(Exception):
    """Temporal did not accept the workflow; the request was rolled back."""


@dataclass(frozen=True)
class SubmissionPolicy:
    """Limits and URL rules a request is checked against (from Settings in the API)."""

    max_runs_per_request: int = 100
    max_input_bytes: int = 64 * 1024
    allow_insecure_callback_localhost: bool = False


@dataclass(frozen=True)
class Submission:
    run: run_queries.RunRecord
    #: True when an Idempotency-Key matched an earlier identical request.
    replayed: bool = False


def validate_request(body: CreateRunRequest, policy: SubmissionPolicy) -> str | None:
    """Check the limits and the callback URL; returns the canonical callback URL."""
    if len(body.runs) > policy.max_runs_per_request:
        raise TooManyRuns(
            f"{len(body.runs)} actor runs requested; at most "
            f"{policy.max_runs_per_request} per request",
            field="/runs",
        )
    for index, spec in enumerate(body.runs):
        size = len(json.dumps(spec.input, separators=(",", ":")).encode("utf-8"))
        if size > policy.max_input_bytes:
            raise InputTooLarge(
                f"input of actor run {index} is {size} bytes; at most "
                f"{policy.max_input_bytes} bytes",
                field=f"/runs/{index}/input",
            )
    if body.callback_webhook is None:
        return None
    try:
        return check_callback_url(
            body.callback_webhook,
            allow_insecure_localhost=policy.allow_insecure_callback_localhost,
        )
    except UnsafeCallbackUrl as exc:
        # exc.reason never quotes the URL (it may carry a token).
        raise UnsafeCallbackWebhook(
            f"callbackWebhook is not allowed: {exc.reason}", field="/callbackWebhook"
        ) from None


def request_hash(body: CreateRunRequest, workspace_id: str) -> str:
    """SHA-256 of the normalised request (defaults filled in, keys sorted)."""
    document = body.model_dump(mode="json", by_alias=True)
    document["workspaceId"] = workspace_id
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def build_run(
    body: CreateRunRequest,
    actors: dict[str, registry.ActorEntry],
    *,
    workspace_id: str | None = None,
    callback_url: str | None = None,
    idempotency_key: str | None = None,
    fingerprint: str | None = None,
) -> run_queries.NewRun:
    """The rows for a request, or :class:`UnknownActor` naming the first unknown actor."""
    workspace = workspace_id or body.workspace_id
    if workspace is None:
        raise WorkspaceRequired("workspaceId is required", field="/workspaceId")
    run_id = new_run_id()
    children = []
    for index, spec in enumerate(body.runs):
        entry = actors.get(spec.actor)
        if entry is None:
            raise UnknownActor(
                f"actor {spec.actor!r} is not registered; known actors: "
                + ", ".join(sorted(actors)),
                field=f"/runs/{index}/actor",
            )
        children.append(
            run_queries.NewChild(
                id=child_id(run_id, index),
                idx=index,
                actor=spec.actor,
                platform_actor_id=entry.platform_actor_id,
                input=spec.input,
                options=spec.options.merged_with(
                    entry.defaults.model_dump(by_alias=True, exclude_none=True)
                ),
            )
        )
    return run_queries.NewRun(
        id=run_id,
        workspace_id=workspace,
        conversation_id=body.conversation_id,
        skill_run_id=body.skill_id,
        callback_url=callback_url if callback_url is not None else body.callback_webhook,
        idempotency_key=idempotency_key,
        request_hash=fingerprint,
        children=tuple(children),
    )


async def submit(
    engine: Engine,
    temporal: Client,
    task_queue: str,
    body: CreateRunRequest,
    *,
    workspace_id: str | None = None,
    policy: SubmissionPolicy | None = None,
    idempotency_key: str | None = None,
) -> Submission:
    """Validate and store a request and start its workflow (or replay an identical one)."""
    policy = policy or SubmissionPolicy()
    workspace = workspace_id or body.workspace_id
    if workspace is None:
        raise WorkspaceRequired("workspaceId is required", field="/workspaceId")
    callback_url = validate_request(body, policy)
    fingerprint = request_hash(body, workspace) if idempotency_key else None

    def earlier() -> run_queries.RunRecord | None:
        if idempotency_key is None:
            return None
        with read_only(engine).connect() as conn:
            found = run_queries.find_run_by_idempotency_key(conn, workspace, idempotency_key)
        if found is not None and found.request_hash != fingerprint:
            raise IdempotencyKeyReused(
                "this Idempotency-Key was already used with a different request",
                field="Idempotency-Key",
            )
        return found

    def store() -> Submission:
        replay = earlier()
        if replay is not None:
            return Submission(run=replay, replayed=True)
        try:
            with engine.begin() as conn:
                run = build_run(
                    body,
                    registry.list_actors(conn),
                    workspace_id=workspace,
                    callback_url=callback_url,
                    idempotency_key=idempotency_key,
                    fingerprint=fingerprint,
                )
                workspace_queries.ensure_workspace(conn, workspace, new_nonce)
                run_queries.insert_run(conn, run)
                record = run_queries.get_run(conn, run.id)
                assert record is not None
                return Submission(run=record)
        except IntegrityError:
            # A concurrent request with the same Idempotency-Key committed first.
            replay = earlier()
            if replay is None:
                raise
            return Submission(run=replay, replayed=True)

    submission = await asyncio.to_thread(store)
    if submission.replayed:
        log.info("idempotent replay of %s", submission.run.id)
        return submission
    record = submission.run
    child_ids = [child_id(record.id, i) for i in range(record.children_total)]
    try:
        await start_request_workflow(temporal, task_queue, record.id, child_ids)
    except Exception as exc:
        log.exception("could not start the workflow of %s; rolling the request back", record.id)
        await asyncio.to_thread(_forget, engine, record.id)
        raise WorkflowStartFailed(str(exc)) from exc
    return submission


async def submit_request(
    engine: Engine,
    temporal: Client,
    task_queue: str,
    body: CreateRunRequest,
    *,
    workspace_id: str | None = None,
    policy: SubmissionPolicy | None = None,
    idempotency_key: str | None = None,
) -> run_queries.RunRecord:
    """:func:`submit` for callers that only need the stored header."""
    submission = await submit(
        engine,
        temporal,
        task_queue,
        body,
        workspace_id=workspace_id,
        policy=policy,
        idempotency_key=idempotency_key,
    )
    return submission.run


def _forget(engine: Engine, run_id: str) -> None:
    with engine.begin() as conn:
        conn.execute(delete(scrape_events).where(scrape_events.c.run_id == run_id))
        conn.execute(delete(scrape_children).where(scrape_children.c.run_id == run_id))
        conn.execute(delete(scrape_runs).where(scrape_runs.c.id == run_id))
