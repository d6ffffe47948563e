"""Submitting a request: validate, store it, start its workflow - or replay an earlier one.

Everything is checked before anything is written (the workspace, limits, every run's
options, the callback URL, every actor against the registry and every input against its
actor's JSON Schema, the Idempotency-Key, the workspace's spending limit), and the
header, its children and its workspace row are written in one transaction, so a rejected
request leaves nothing behind. The workflow id is derived from the run id, so starting it
again (a retried call) finds the same execution.

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
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError
from temporalio.client import Client

from orchestrator.config.settings import Settings
from orchestrator.db.engine import read_only
from orchestrator.db.queries import catalog as catalog_queries
from orchestrator.db.queries import plans as plan_queries
from orchestrator.db.queries import registry
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.queries import workspaces as workspace_queries
from orchestrator.delivery.url_guard import UnsafeCallbackUrl, check_callback_url
from orchestrator.domain.budget import check_budget, split_budget
from orchestrator.domain.chaining import check_input_from
from orchestrator.domain.errors import NotFound, UnknownActor, ValidationFailed
from orchestrator.domain.ids import child_id, new_run_id
from orchestrator.domain.input_schema import input_error
from orchestrator.domain.pricing import check_charge_limit, minimum_charge_usd
from orchestrator.domain.row_push import DELIVER_ROWS_CALLBACK, DELIVER_ROWS_NONE
from orchestrator.domain.run_options import check_run_options
from orchestrator.security.callback_secrets import new_nonce
from orchestrator.service.auth import Principal
from orchestrator.service.budgets import refuse_if_exhausted
from orchestrator.service.commands import ActorRun, SubmitRequest
from orchestrator.service.errors import (
    EngineUnavailable,
    IdempotencyKeyReused,
    InputTooLarge,
    TooManyRuns,
    UnsafeCallbackWebhook,
    WorkflowStartFailed,
    WorkspaceRequired,
)
from orchestrator.service.launch import start_request_workflow, step_graph

log = logging.getLogger(__name__)


def _setting_default(name: str) -> Any:
    return Settings.model_fields[name].default


@dataclass(frozen=True)
class SubmissionPolicy:
    """Limits and URL rules a request is checked against; defaults are the settings'."""

    max_runs_per_request: int = _setting_default("max_runs_per_request")
    max_input_bytes: int = _setting_default("max_input_bytes")
    allow_insecure_callback_localhost: bool = _setting_default("allow_insecure_callback_localhost")
    max_step_input_values: int = _setting_default("max_step_input_values")

    @classmethod
    def from_settings(cls, settings: Settings) -> SubmissionPolicy:
        return cls(
            max_runs_per_request=settings.max_runs_per_request,
            max_input_bytes=settings.max_input_bytes,
            max_step_input_values=settings.max_step_input_values,
            allow_insecure_callback_localhost=settings.allow_insecure_callback_localhost,
        )


@dataclass(frozen=True)
class Submission:
    run: run_queries.RunRecord
    #: True when an Idempotency-Key matched an earlier identical request.
    replayed: bool = False


def workspace_of(command: SubmitRequest, caller: Principal | None) -> str:
    """The workspace a request is for (see :func:`workspace_named`)."""
    return workspace_named(command.workspace_id, caller)


def workspace_named(workspace_id: str | None, caller: Principal | None) -> str:
    """The workspace a request or a plan is for: a workspace key's own (naming another is a
    404, as for any other tenant's resource); an admin key or an internal caller must name
    one."""
    if caller is not None and caller.workspace_id is not None:
        if workspace_id not in (None, caller.workspace_id):
            raise NotFound(f"workspace {workspace_id} does not exist", field="/workspaceId")
        return caller.workspace_id
    if workspace_id is None:
        detail = "workspaceId is required" + (" with an admin key" if caller else "")
        raise WorkspaceRequired(detail, field="/workspaceId")
    return workspace_id


def validate_request(command: SubmitRequest, policy: SubmissionPolicy) -> str | None:
    """Check the limits, the options and the callback URL; returns the canonical URL."""
    if len(command.runs) > policy.max_runs_per_request:
        raise TooManyRuns(
            f"{len(command.runs)} actor runs requested; at most "
            f"{policy.max_runs_per_request} per request",
            field="/runs",
        )
    for index, spec in enumerate(command.runs):
        size = len(json.dumps(spec.input, separators=(",", ":")).encode("utf-8"))
        if size > policy.max_input_bytes:
            raise InputTooLarge(
                f"input of actor run {index} is {size} bytes; at most "
                f"{policy.max_input_bytes} bytes",
                field=f"/runs/{index}/input",
            )
        check_run_options(spec.options, pointer=f"/runs/{index}/options")
    resolve_chains(command, policy)
    if command.budget_usd is not None:
        check_budget(command.budget_usd)
    if command.deliver_rows == DELIVER_ROWS_CALLBACK and command.callback_webhook is None:
        raise ValidationFailed(
            'deliver.rows "callback" needs a callbackWebhook to push the rows to',
            field="/deliver/rows",
        )
    if command.callback_webhook is None:
        return None
    try:
        return check_callback_url(
            command.callback_webhook,
            allow_insecure_localhost=policy.allow_insecure_callback_localhost,
        )
    except UnsafeCallbackUrl as exc:
        # exc.reason never quotes the URL (it may carry a token).
        raise UnsafeCallbackWebhook(
            f"callbackWebhook is not allowed: {exc.reason}", field="/callbackWebhook"
        ) from None


def resolve_chains(command: SubmitRequest, policy: SubmissionPolicy) -> SubmitRequest:
    """Check every chained run's sources (``domain.chaining``) and fill in their ``max``.

    A chained run's static ``input`` is checked as any other; the fields built from rows
    are checked against the actor only once built (they are not known before).
    """
    runs = []
    for index, spec in enumerate(command.runs):
        if spec.input_from:
            sources = check_input_from(
                index,
                spec.input,
                spec.input_from,
                runs=len(command.runs),
                hard_max=policy.max_step_input_values,
            )
            spec = replace(spec, input_from=sources)
        runs.append(spec)
    return replace(command, runs=tuple(runs))


def canonical_request(command: SubmitRequest, workspace_id: str) -> dict[str, Any]:
    """The request in the fingerprint's own fixed form: every field, unset ones as null.

    The names are spelled out here, not taken from the API's aliases, so renaming a wire
    field cannot change stored fingerprints. The form equals the request body as the API
    received it with defaults filled in, which keeps fingerprints stored before this
    function existed valid; ``budgetUsd`` and a run's ``maxTotalChargeUsd`` are added only when
    set, for the same reason.
    """
    document: dict[str, Any] = {
        "workspaceId": workspace_id,
        "conversationId": command.conversation_id,
        "skillId": command.skill_id,
        "callbackWebhook": command.callback_webhook,
        "runs": [_canonical_run(spec) for spec in command.runs],
    }
    # Only when it differs from the default, so fingerprints stored before the flag existed
    # still match the same request.
    if not command.keep_partial_rows:
        document["keepPartialRows"] = False
    if command.budget_usd is not None:
        document["budgetUsd"] = command.budget_usd
    # Only when rows are pushed, so fingerprints stored before the field existed still match.
    if command.deliver_rows != DELIVER_ROWS_NONE:
        document["deliver"] = {"rows": command.deliver_rows}
    return document


def _canonical_run(spec: ActorRun) -> dict[str, Any]:
    options: dict[str, Any] = {
        "memoryMb": spec.options.memory_mb,
        "timeoutSec": spec.options.timeout_sec,
        "build": spec.options.build,
        "maxItems": spec.options.max_items,
    }
    # Options newer than the first fingerprints count only when set, as budgetUsd does.
    if spec.options.max_total_charge_usd is not None:
        options["maxTotalChargeUsd"] = spec.options.max_total_charge_usd
    run: dict[str, Any] = {"actor": spec.actor, "input": spec.input, "options": options}
    # Only chained runs carry it, so the fingerprints of every other run are unchanged.
    if spec.input_from:
        run["inputFrom"] = {name: source.stored() for name, source in spec.input_from.items()}
    return run


def request_hash(command: SubmitRequest, workspace_id: str) -> str:
    """SHA-256 of the canonical request (keys sorted, compact, UTF-8)."""
    document = canonical_request(command, workspace_id)
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def check_input(spec: ActorRun, entry: registry.ActorEntry, index: int) -> None:
    """The run's input against its actor's ``inputSchema``: a :class:`ValidationFailed`
    naming ``/runs/N/input/<path of the error>`` and saying what is wrong."""
    # A chained run's built fields are not there yet: they count as present here and are
    # checked once built (activities.steps).
    later = frozenset(spec.input_from or ())
    error = input_error(entry.input_schema, spec.input, provided_later=later)
    if error is not None:
        pointer = f"/runs/{index}/input{error.pointer}"
        raise ValidationFailed(
            f"{pointer}: {error.message} (the input schema of {spec.actor})", field=pointer
        )


def build_run(
    command: SubmitRequest,
    actors: dict[str, registry.ActorEntry],
    *,
    workspace_id: str,
    callback_url: str | None = None,
    idempotency_key: str | None = None,
    fingerprint: str | None = None,
    catalog_version: int | None = None,
) -> run_queries.NewRun:
    """The rows for a request, or :class:`UnknownActor` naming the first unknown actor
    (:class:`ValidationFailed` for an input its actor's schema refuses)."""
    run_id = new_run_id()
    effective = []
    minimums: list[float] = []
    for index, spec in enumerate(command.runs):
        entry = actors.get(spec.actor)
        if entry is None:
            raise UnknownActor(
                f"actor {spec.actor!r} is not registered; known actors: "
                + ", ".join(sorted(actors)),
                field=f"/runs/{index}/actor",
            )
        check_input(spec, entry, index)
        pointer = f"/runs/{index}/options"
        options = spec.options.over(entry.defaults.as_options())
        # The caller's own options were checked already; only a registry default can fail.
        check_run_options(
            options,
            pointer=pointer,
            source=f"the registry default of {spec.actor}; set the option explicitly",
        )
        options = entry.caps.as_caps().apply(options, pointer=pointer, actor=spec.actor)
        minimum = minimum_charge_usd(entry.actor_pricing(), options.memory_mb)
        check_charge_limit(
            options.max_total_charge_usd,
            minimum,
            pointer=f"{pointer}/maxTotalChargeUsd",
            source=""
            if spec.options.max_total_charge_usd is not None
            else f"the registry default or cap of {spec.actor}; set the option explicitly",
        )
        effective.append((spec, entry, options))
        minimums.append(minimum)
    if command.budget_usd is not None:
        # After defaults and caps, so each child's own limit is the one the split respects;
        # no share is below its actor's minimum charge (or the budget is refused).
        shares = split_budget(
            command.budget_usd,
            [o.max_total_charge_usd for *_, o in effective],
            minimums,
            names=[f"/runs/{index} ({spec.actor})" for index, (spec, *_) in enumerate(effective)],
        )
        effective = [
            (spec, entry, replace(options, max_total_charge_usd=share))
            for (spec, entry, options), share in zip(effective, shares, strict=True)
        ]
    children = [
        run_queries.NewChild(
            id=child_id(run_id, index),
            idx=index,
            actor=spec.actor,
            platform_actor_id=entry.platform_actor_id,
            input=spec.input,
            options=options.stored(),
            input_from={name: source.stored() for name, source in spec.input_from.items()}
            if spec.input_from
            else None,
        )
        for index, (spec, entry, options) in enumerate(effective)
    ]
    return run_queries.NewRun(
        id=run_id,
        workspace_id=workspace_id,
        conversation_id=command.conversation_id,
        skill_run_id=command.skill_id,
        callback_url=callback_url,
        idempotency_key=idempotency_key,
        request_hash=fingerprint,
        budget_usd=command.budget_usd,
        children=tuple(children),
        keep_partial_rows=command.keep_partial_rows,
        catalog_version=catalog_version,
        deliver_rows=command.deliver_rows,
        plan_id=command.plan_id,
    )


def _earlier(
    engine: Engine, workspace: str, idempotency_key: str | None, fingerprint: str | None
) -> run_queries.RunRecord | None:
    """The run an Idempotency-Key was first used for, if the request is the same one."""
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


def _store(
    engine: Engine,
    command: SubmitRequest,
    *,
    workspace: str,
    callback_url: str | None,
    idempotency_key: str | None,
    fingerprint: str | None,
) -> Submission:
    """Write the request in one transaction, or find the earlier one it replays."""
    replay = _earlier(engine, workspace, idempotency_key, fingerprint)
    if replay is not None:
        return Submission(run=replay, replayed=True)
    try:
        with engine.begin() as conn:
            # The entries and the version read together (a catalog write waits, or is seen).
            catalog_queries.lock_catalog(conn, shared=True)
            run = build_run(
                command,
                registry.list_actors(conn),
                workspace_id=workspace,
                callback_url=callback_url,
                idempotency_key=idempotency_key,
                fingerprint=fingerprint,
                catalog_version=catalog_queries.current_version(conn),
            )
            refuse_if_exhausted(conn, workspace)
            workspace_queries.ensure_workspace(conn, workspace, new_nonce)
            if command.new_plan is not None:
                plan = command.new_plan
                plan_queries.insert_plan(
                    conn,
                    plan.id,
                    plan.workspace_id,
                    plan.catalog_version,
                    plan.strategy,
                    plan.brief,
                    plan.document,
                )
            run_queries.insert_run(conn, run)
            record = run_queries.get_run(conn, run.id)
            assert record is not None
            return Submission(run=record)
    except IntegrityError:
        # A concurrent request with the same Idempotency-Key committed first.
        replay = _earlier(engine, workspace, idempotency_key, fingerprint)
        if replay is None:
            raise
        return Submission(run=replay, replayed=True)


async def _start(
    engine: Engine,
    temporal: Client,
    task_queue: str,
    record: run_queries.RunRecord,
    command: SubmitRequest,
) -> None:
    """Start the stored request's workflow; if Temporal refuses, delete the request again."""
    try:
        await start_request_workflow(temporal, task_queue, *_workflow_args(record, command))
    except Exception as exc:
        log.exception("could not start the workflow of %s; rolling the request back", record.id)
        await asyncio.to_thread(_forget, engine, record.id)
        raise WorkflowStartFailed("the request could not be started") from exc


async def submit(
    engine: Engine,
    temporal: Client | None,
    task_queue: str,
    command: SubmitRequest,
    *,
    caller: Principal | None = None,
    policy: SubmissionPolicy | None = None,
    idempotency_key: str | None = None,
) -> Submission:
    """Validate and store a request and start its workflow (or replay an identical one).

    ``caller`` is the API key's principal (None for internal callers, which must name the
    workspace).
    """
    workspace = workspace_of(command, caller)
    if temporal is None:
        raise EngineUnavailable("Temporal is not connected")
    callback_url = validate_request(command, policy or SubmissionPolicy())
    fingerprint = request_hash(command, workspace) if idempotency_key else None
    # After the fingerprint: it is of the request as sent, not of the settings' defaults.
    command = resolve_chains(command, policy or SubmissionPolicy())
    submission = await asyncio.to_thread(
        _store,
        engine,
        command,
        workspace=workspace,
        callback_url=callback_url,
        idempotency_key=idempotency_key,
        fingerprint=fingerprint,
    )
    if not submission.replayed:
        await _start(engine, temporal, task_queue, submission.run, command)
    elif not submission.run.terminal:
        log.info("idempotent replay of %s", submission.run.id)
        await _ensure_started(temporal, task_queue, submission.run, command)
    return submission


async def _ensure_started(
    temporal: Client, task_queue: str, record: run_queries.RunRecord, command: SubmitRequest
) -> None:
    """Start a replayed request's workflow unless it runs: the first call may have stored the
    request and then died (or been cancelled) before starting it, and the caller's retry is
    the soonest anyone learns of it. The workflow id is the run's, so a running workflow is
    found, never doubled; if Temporal fails here the reconciler still starts it later."""
    try:
        await start_request_workflow(temporal, task_queue, *_workflow_args(record, command))
    except Exception:
        log.warning("could not make sure the workflow of %s runs", record.id, exc_info=True)


def _workflow_args(
    record: run_queries.RunRecord, command: SubmitRequest
) -> tuple[str, list[str], dict[str, list[str]]]:
    """The run id, child ids and step graph the request's workflow starts with."""
    child_ids = [child_id(record.id, i) for i in range(record.children_total)]
    return record.id, child_ids, step_graph(record.id, [spec.input_from for spec in command.runs])


def _forget(engine: Engine, run_id: str) -> None:
    with engine.begin() as conn:
        run_queries.delete_run(conn, run_id)
