"""Handlers for the Apify v2 surface (`/v2/...`), built as Starlette routes.

Handlers parse query params by hand (see `util.py`) so they can accept
Apify's loose spellings, ignore unknown params and answer with Apify error
envelopes. Each route is registered under `/v2/actors/...` and the legacy
`/v2/acts/...` alias with the same handler.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from apify_emulator.actors import (
    ACTORS,
    TERMINAL_STATUSES,
    ActorDef,
    RunScript,
    find_actor,
    plan_run,
    row,
    row_texts,
)
from apify_emulator.config import EmulatorConfig
from apify_emulator.errors import JSON_MEDIA_TYPE, ApiError
from apify_emulator.state import RunRecord, Store
from apify_emulator.util import (
    iso,
    new_id,
    parse_bool,
    parse_int,
    parse_iso,
    parse_list,
    parse_number,
)
from apify_emulator.webhooks import WebhookDispatcher, parse_webhooks_param, public_dispatch

log = logging.getLogger(__name__)

MAX_WAIT_FOR_FINISH = 60.0
NO_LIMIT = 999_999_999_999
LIST_LIMIT = 1000
#: Pages up to this many rows are answered whole (with a Content-Length, ~5 MB at most for
#: the benchmark's rows); bigger windows stream in chunks of ITEMS_CHUNK rows.
ITEMS_WHOLE = 10_000
ITEMS_CHUNK = 2000
# What /v2/users/me/limits reports for a cap that is off (0): far above any load.
UNLIMITED_RUNS = 100_000
UNLIMITED_MEMORY_MB = 100_000 * 1024
Handler = Callable[[Request], Awaitable[Response]]


def ok(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        {"data": data}, status_code=status, headers=headers, media_type=JSON_MEDIA_TYPE
    )


def page(items: list[Any], total: int, offset: int, limit: int, desc: bool) -> dict[str, Any]:
    return {
        "total": total,
        "offset": offset,
        "limit": limit,
        "desc": desc,
        "count": len(items),
        "items": items,
    }


class ApifyApi:
    def __init__(self, cfg: EmulatorConfig, store: Store, dispatcher: WebhookDispatcher) -> None:
        self.cfg = cfg
        self.store = store
        self.dispatcher = dispatcher

    # ---- helpers --------------------------------------------------------
    def token(self, request: Request, *, required: bool = True) -> bool:
        """Check the token; returns whether a valid one was sent."""
        auth = request.headers.get("authorization", "")
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        token = token or request.query_params.get("token", "")
        if not token:
            if required:
                raise ApiError(401, "token-not-provided", "Authentication token was not provided")
            return False
        if not self.cfg.token_ok(token):
            raise ApiError(
                401,
                "user-or-token-not-found",
                "User was not found or authentication token is not valid",
            )
        return True

    def actor(self, request: Request, type_: str = "record-not-found") -> ActorDef:
        actor = find_actor(request.path_params["actorId"], self.cfg.username)
        if actor is None:
            raise ApiError.actor_not_found(type_)
        return actor

    def run(self, request: Request) -> RunRecord:
        run = self.store.runs.get(request.path_params["runId"])
        if run is None:
            raise ApiError.run_not_found()
        return run

    async def wait_terminal(self, run: RunRecord, secs: float) -> None:
        """Long-poll until the run is terminal or `secs` (real seconds) pass."""
        deadline = time.monotonic() + min(secs, MAX_WAIT_FOR_FINISH)
        while True:
            now = time.time()
            if run.status(self.cfg, now) in TERMINAL_STATUSES:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            nxt = run.next_change_after(self.cfg, now)
            # Sleep to the next scripted transition, but wake at least every 100 ms so an
            # abort (which rewrites the timeline) is noticed quickly.
            step = min(remaining, 0.1, (nxt - now) + 0.001 if nxt is not None else remaining)
            await asyncio.sleep(max(step, 0.001))

    # ---- actors ---------------------------------------------------------
    def actor_api(self, actor: ActorDef) -> dict[str, Any]:
        created = iso(1_700_000_000.0)
        return {
            "id": actor.actor_id(self.cfg.username),
            "userId": self.cfg.user_id,
            "name": actor.name,
            "username": self.cfg.username,
            "title": actor.title,
            "description": actor.description,
            "isPublic": False,
            "restartOnError": False,
            "createdAt": created,
            "modifiedAt": created,
            "stats": {
                "totalBuilds": 1,
                "totalRuns": sum(1 for r in self.store.runs.values() if r.actor_name == actor.name),
            },
            "versions": [
                {"versionNumber": "0.0", "sourceType": "SOURCE_FILES", "buildTag": "latest"}
            ],
            "defaultRunOptions": {
                "build": "latest",
                "timeoutSecs": self.cfg.default_timeout_secs,
                "memoryMbytes": self.cfg.default_memory_mbytes,
            },
            "exampleRunInput": {"body": "{}", "contentType": "application/json; charset=utf-8"},
            "isDeprecated": False,
            "taggedBuilds": {"latest": {"buildNumber": "0.0.1", "buildNumberInt": 1}},
            "pricingInfos": [actor.pricing.to_api()],
        }

    async def get_actor(self, request: Request) -> Response:
        self.token(request)
        return ok(self.actor_api(self.actor(request, "record-or-token-not-found")))

    async def list_actors(self, request: Request) -> Response:
        self.token(request)
        offset, limit, desc = self._paging(request)
        items = [
            {
                "id": a.actor_id(self.cfg.username),
                "createdAt": iso(1_700_000_000.0),
                "modifiedAt": iso(1_700_000_000.0),
                "name": a.name,
                "username": self.cfg.username,
            }
            for a in ACTORS
        ]
        if desc:
            items.reverse()
        return ok(page(items[offset : offset + limit], len(items), offset, limit, desc))

    # ---- runs -----------------------------------------------------------
    async def start_run(self, request: Request) -> Response:
        self.token(request)
        actor = self.actor(request)
        opts = self._start_options(request)
        if opts.max_charge is not None and actor.pricing.refuses_max_total_charge(opts.max_charge):
            raise ApiError(
                400,
                "max-total-charge-usd-below-minimum",
                f"Parameter 'maxTotalChargeUsd' ({opts.max_charge:g}) is less than the "
                f"minimum of ${actor.pricing.minimal_max_total_charge_usd:g} for this Actor",
            )
        body, content_type, inp = await self._run_input(request)
        script = plan_run(actor, inp, opts.max_items)
        now = time.time()
        self._check_capacity(now, opts.memory)
        run = RunRecord(
            id=new_id(),
            actor_id=actor.actor_id(self.cfg.username),
            actor_name=actor.name,
            user_id=self.cfg.user_id,
            started_at=now,
            scale=self.cfg.time_scale,
            script=script,
            timeout_secs=opts.timeout_secs,
            memory_mbytes=opts.memory,
            build=opts.build,
            max_items=opts.max_items,
            max_total_charge_usd=opts.max_charge,
            input_body_len=len(body),
            input_content_type=content_type,
            input_body=body.decode("utf-8", "replace"),
            dataset_id=new_id(),
            key_value_store_id=new_id(),
            request_queue_id=new_id(),
            client_ip=request.client.host if request.client else None,
            user_agent=request.headers.get("user-agent"),
            webhooks=self._new_webhooks(opts.hooks, now),
            pricing=actor.pricing,
        )
        self.store.add_run(run)
        self.dispatcher.watch(run)
        log.info(
            "started run %s of %s (%d items, %s s)",
            run.id,
            actor.name,
            script.item_count,
            script.duration_secs,
        )
        if opts.wait > 0:
            await self.wait_terminal(run, opts.wait)
        location = f"{self.cfg.base_url()}/v2/actors/{run.actor_id}/runs/{run.id}"
        return ok(run.to_api(self.cfg, time.time()), 201, {"Location": location})

    def _start_options(self, request: Request) -> _StartOptions:
        q = request.query_params
        memory = parse_int(q.get("memory"), "memory")
        memory = self.cfg.default_memory_mbytes if memory is None else memory
        if memory < 128 or memory > 32768 or memory & (memory - 1):
            raise ApiError.invalid(
                f"Memory must be a power of 2 between 128 and 32768 megabytes (got {memory})"
            )
        timeout = parse_number(q.get("timeout"), "timeout", minimum=0)
        max_items = parse_int(q.get("maxItems"), "maxItems")
        if max_items is not None and max_items <= 0:
            raise ApiError(
                400,
                "max-items-must-be-greater-than-zero",
                "Parameter 'maxItems' must be greater than zero",
            )
        max_charge = parse_number(q.get("maxTotalChargeUsd"), "maxTotalChargeUsd")
        if max_charge is not None and max_charge <= 0:
            raise ApiError(
                400,
                "max-total-charge-usd-must-be-greater-than-zero",
                "Parameter 'maxTotalChargeUsd' must be greater than zero",
            )
        wait = parse_number(q.get("waitForFinish"), "waitForFinish", minimum=0) or 0.0
        parse_bool(q.get("restartOnError"), "restartOnError")  # validated, has no effect
        return _StartOptions(
            memory=memory,
            timeout_secs=self.cfg.default_timeout_secs if timeout is None else int(timeout),
            max_items=max_items,
            max_charge=max_charge,
            wait=wait,
            build=q.get("build") or "latest",
            hooks=parse_webhooks_param(q.get("webhooks")),
        )

    async def _run_input(self, request: Request) -> tuple[bytes, str, dict[str, Any]]:
        """The raw body, its content type and the input object (`{}` for a non-object)."""
        body = await request.body()
        content_type = request.headers.get("content-type", "application/json")
        inp: Any = {}
        if body and "json" in content_type.lower():
            try:
                inp = json.loads(body)
            except ValueError:
                raise ApiError(400, "invalid-input", "Input is not valid JSON") from None
        return body, content_type, inp if isinstance(inp, dict) else {}

    def _check_capacity(self, now: float, memory: int) -> None:
        """402 when one more run of `memory` MB would pass the account's caps."""
        active = self.store.active_runs(now)
        if self.cfg.max_concurrent_runs and len(active) >= self.cfg.max_concurrent_runs:
            raise ApiError(
                402,
                "concurrent-runs-limit-exceeded",
                f"By launching this job you will exceed the limit of {self.cfg.max_concurrent_runs}"
                " concurrent Actor runs and builds.",
            )
        used = sum(r.memory_mbytes for r in active)
        if self.cfg.max_total_memory_mbytes and used + memory > self.cfg.max_total_memory_mbytes:
            raise ApiError(
                402,
                "actor-memory-limit-exceeded",
                "By launching this job you will exceed the memory limit of "
                f"{self.cfg.max_total_memory_mbytes}MB for all your Actor runs and builds "
                f"(currently used: {used}MB, requested: {memory}MB).",
            )

    def _new_webhooks(self, hooks: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        attached = []
        for hook in hooks:
            key = hook.get("idempotencyKey")
            if key and key in self.store.webhook_keys:
                # Same key as an existing webhook (e.g. a retried start): not created again.
                continue
            attached.append({**hook, "id": new_id(), "createdAt": iso(now)})
        return attached

    async def get_run(self, request: Request) -> Response:
        with_token = self.token(request, required=False)
        run = self.run(request)
        self._check_actor_of_run(request, run)
        wait = parse_number(request.query_params.get("waitForFinish"), "waitForFinish", minimum=0)
        if wait:
            await self.wait_terminal(run, wait)
        return ok(run.to_api(self.cfg, time.time(), with_usage=with_token))

    def _check_actor_of_run(self, request: Request, run: RunRecord) -> None:
        if (
            "actorId" in request.path_params
            and self.actor(request).actor_id(self.cfg.username) != run.actor_id
        ):
            raise ApiError.run_not_found()

    async def last_run(self, request: Request) -> Response:
        self.token(request)
        actor = self.actor(request)
        statuses = set(parse_list(request.query_params.get("status")))
        now = time.time()
        runs = [
            r
            for r in self.store.runs.values()
            if r.actor_name == actor.name and (not statuses or r.status(self.cfg, now) in statuses)
        ]
        if not runs:
            raise ApiError.run_not_found()
        run = max(runs, key=lambda r: r.started_at)
        return ok(run.to_api(self.cfg, now))

    async def update_run(self, request: Request) -> Response:
        self.token(request)
        run = self.run(request)
        body = await self._json_body(request)
        if "statusMessage" in body:
            if not isinstance(body["statusMessage"], str | None):
                raise ApiError.invalid("'statusMessage' must be a string")
            run.status_message = body["statusMessage"]
        if "generalAccess" in body:
            run.general_access = str(body["generalAccess"])
        self.store.save_run(run)
        return ok(run.to_api(self.cfg, time.time()))

    async def abort_run(self, request: Request) -> Response:
        self.token(request)
        run = self.run(request)
        self._check_actor_of_run(request, run)
        graceful = parse_bool(request.query_params.get("gracefully"), "gracefully")
        now = time.time()
        if run.status(self.cfg, now) in {"READY", "RUNNING", "TIMING-OUT"}:
            run.abort_at = now
            run.abort_graceful = graceful
            self.store.save_run(run)
            self.dispatcher.watch(run)
            log.info("aborting run %s (gracefully=%s)", run.id, graceful)
        return ok(run.to_api(self.cfg, now))

    def _paging(self, request: Request) -> tuple[int, int, bool]:
        q = request.query_params
        offset = parse_int(q.get("offset"), "offset", minimum=0) or 0
        limit = parse_int(q.get("limit"), "limit", minimum=0)
        limit = LIST_LIMIT if not limit else min(limit, LIST_LIMIT)
        return offset, limit, parse_bool(q.get("desc"), "desc")

    async def list_runs(self, request: Request) -> Response:
        self.token(request)
        actor = self.actor(request) if "actorId" in request.path_params else None
        offset, limit, desc = self._paging(request)
        q = request.query_params
        statuses = set(parse_list(q.get("status")))
        after = parse_iso(q["startedAfter"], "startedAfter") if q.get("startedAfter") else None
        before = parse_iso(q["startedBefore"], "startedBefore") if q.get("startedBefore") else None
        now = time.time()
        runs = sorted(self.store.runs.values(), key=lambda r: r.started_at, reverse=desc)
        selected = [
            r
            for r in runs
            if (actor is None or r.actor_name == actor.name)
            and (not statuses or r.status(self.cfg, now) in statuses)
            and (after is None or r.started_at > after)
            and (before is None or r.started_at < before)
        ]
        items = [r.to_short(self.cfg, now) for r in selected[offset : offset + limit]]
        return ok(page(items, len(selected), offset, limit, desc))

    async def run_log(self, request: Request) -> Response:
        self.token(request, required=False)
        run = self.store.runs.get(
            request.path_params.get("runId") or request.path_params.get("buildOrRunId", "")
        )
        if run is None:
            raise ApiError.not_found("Log was not found")
        stream = parse_bool(request.query_params.get("stream"), "stream")
        media = "text/plain; charset=utf-8"
        if not stream or run.status(self.cfg) in TERMINAL_STATUSES:
            return Response(self._log_text(run, time.time()), media_type=media)

        async def follow() -> AsyncIterator[str]:
            sent = 0
            while True:
                now = time.time()
                text = self._log_text(run, now)
                if len(text) > sent:
                    yield text[sent:]
                    sent = len(text)
                if run.status(self.cfg, now) in TERMINAL_STATUSES:
                    return
                await asyncio.sleep(0.1)

        return StreamingResponse(follow(), media_type=media)

    def _log_text(self, run: RunRecord, t: float) -> str:
        lines = []
        for phase in run.timeline(self.cfg):
            if phase.at > t:
                break
            message = phase.message or run.script.running_message
            lines.append(f"{iso(phase.at)} ACTOR: {phase.status}: {message}\n")
        return "".join(lines)

    # ---- datasets -------------------------------------------------------
    def dataset_run(self, request: Request) -> RunRecord:
        if "runId" in request.path_params:
            return self.run(request)
        run = self.store.run_for_dataset(request.path_params["datasetId"])
        if run is None:
            raise ApiError.dataset_not_found()
        return run

    async def get_dataset(self, request: Request) -> Response:
        self.token(request)
        run = self.dataset_run(request)
        return ok(run.dataset_api(self.cfg, time.time()))

    async def dataset_items(self, request: Request) -> Response:
        self.token(request)
        run = self.dataset_run(request)
        query = _ItemsQuery.parse(request)
        total = run.visible_items(self.cfg, time.time())
        # Offset/limit select the scanned window; filters apply after it (as on the platform),
        # so Count reports the window, not the number of returned items.
        start = min(query.offset, total)
        end = total if query.limit is None else min(total, start + query.limit)
        window = (
            range(start, end) if not query.desc else range(total - 1 - start, total - 1 - end, -1)
        )
        headers = {
            "X-Apify-Pagination-Offset": str(query.offset),
            "X-Apify-Pagination-Limit": str(NO_LIMIT if query.limit is None else query.limit),
            "X-Apify-Pagination-Count": str(len(window)),
            "X-Apify-Pagination-Total": str(total),
            "X-Apify-Pagination-Desc": "true" if query.desc else "false",
        }
        delay = run.script.page_delay_ms / 1000 * run.scale
        if delay > 0:
            await asyncio.sleep(delay)
        media = JSON_MEDIA_TYPE if query.fmt == "json" else "application/jsonl; charset=utf-8"
        if request.method == "HEAD":
            return Response(b"", headers=headers, media_type=media)
        chunks = _encode(query.texts(run.script, window), query.fmt)
        if len(window) <= ITEMS_WHOLE:
            return Response("".join(chunks), headers=headers, media_type=media)
        return StreamingResponse(chunks, headers=headers, media_type=media)

    # ---- account & dispatches --------------------------------------------
    async def limits(self, request: Request) -> Response:
        self.token(request)
        now = time.time()
        active = self.store.active_runs(now)
        cycle_start = now - now % (30 * 86400)
        data = {
            "monthlyUsageCycle": {
                "startAt": iso(cycle_start),
                "endAt": iso(cycle_start + 30 * 86400),
            },
            "limits": {
                "maxMonthlyUsageUsd": 1000.0,
                "maxMonthlyActorComputeUnits": 10000.0,
                "maxMonthlyExternalDataTransferGbytes": 1000.0,
                "maxMonthlyProxySerps": 100000,
                "maxMonthlyResidentialProxyGbytes": 100.0,
                # A cap of 0 is "off" here; the real platform never reports 0, so "off"
                # reports a limit no load reaches (UNLIMITED_*), not a zero a client would
                # read as "nothing may run".
                "maxActorMemoryGbytes": (self.cfg.max_total_memory_mbytes or UNLIMITED_MEMORY_MB)
                / 1024,
                "maxActorCount": 500,
                "maxActorTaskCount": 1000,
                "maxConcurrentActorJobs": self.cfg.max_concurrent_runs or UNLIMITED_RUNS,
                "maxTeamAccountSeatCount": 9,
                "dataRetentionDays": 7,
            },
            "current": {
                "monthlyUsageUsd": 0.0,
                "monthlyActorComputeUnits": 0.0,
                "monthlyExternalDataTransferGbytes": 0.0,
                "monthlyProxySerps": 0,
                "monthlyResidentialProxyGbytes": 0.0,
                "actorMemoryGbytes": sum(r.memory_mbytes for r in active) / 1024,
                "actorCount": len(ACTORS),
                "actorTaskCount": 0,
                "activeActorJobCount": len(active),
                "teamAccountSeatCount": 1,
            },
        }
        return ok(data)

    async def list_dispatches(self, request: Request) -> Response:
        self.token(request)
        offset, limit, desc = self._paging(request)
        items = sorted(self.store.dispatches.values(), key=lambda d: d["createdAt"], reverse=desc)
        chosen = [public_dispatch(d) for d in items[offset : offset + limit]]
        return ok(page(chosen, len(items), offset, limit, desc))

    async def get_dispatch(self, request: Request) -> Response:
        self.token(request)
        dispatch = self.store.dispatches.get(request.path_params["dispatchId"])
        if dispatch is None:
            raise ApiError.not_found("Webhook dispatch was not found")
        return ok(public_dispatch(dispatch))

    async def list_webhooks(self, request: Request) -> Response:
        """The account's webhooks. Only ad-hoc ones exist here (``isAdHoc: true``), each
        bound to its run by ``condition.actorRunId``, as the platform lists them."""
        self.token(request)
        offset, limit, desc = self._paging(request)
        hooks = [
            {
                "id": hook["id"],
                "createdAt": hook["createdAt"],
                "modifiedAt": hook["createdAt"],
                "userId": run.user_id,
                "isAdHoc": True,
                "isApifyIntegration": False,
                "isEnabled": True,
                "actionType": "HTTP_REQUEST",
                "shouldInterpolateStrings": bool(hook.get("shouldInterpolateStrings")),
                "eventTypes": list(hook.get("eventTypes", [])),
                "condition": {"actorRunId": run.id},
                "ignoreSslErrors": bool(hook.get("ignoreSslErrors")),
                "doNotRetry": bool(hook.get("doNotRetry")),
                "requestUrl": hook.get("requestUrl"),
            }
            for run in self.store.runs.values()
            for hook in run.webhooks
        ]
        hooks.sort(key=lambda h: h["createdAt"], reverse=desc)
        return ok(page(hooks[offset : offset + limit], len(hooks), offset, limit, desc))

    async def _json_body(self, request: Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError:
            raise ApiError(400, "invalid-request", "POST data must be a JSON object") from None
        if not isinstance(body, dict):
            raise ApiError(400, "invalid-request", "POST data must be a JSON object")
        return body

    # ---- routing --------------------------------------------------------
    def routes(self) -> list[BaseRoute]:
        actor_routes: list[tuple[str, Handler, list[str]]] = [
            ("", self.get_actor, ["GET"]),
            ("/runs", self.list_runs, ["GET"]),
            ("/runs", self.start_run, ["POST"]),
            ("/runs/last", self.last_run, ["GET"]),
            ("/runs/{runId}", self.get_run, ["GET"]),
            ("/runs/{runId}/abort", self.abort_run, ["POST"]),
        ]
        routes: list[BaseRoute] = [Route("/v2/actors", self.list_actors, methods=["GET"])]
        for prefix in ("/v2/actors/{actorId}", "/v2/acts/{actorId}"):
            routes += [Route(prefix + p, h, methods=m) for p, h, m in actor_routes]
        routes += [
            Route("/v2/actor-runs", self.list_runs, methods=["GET"]),
            Route("/v2/actor-runs/{runId}", self.get_run, methods=["GET"]),
            Route("/v2/actor-runs/{runId}", self.update_run, methods=["PUT"]),
            Route("/v2/actor-runs/{runId}/abort", self.abort_run, methods=["POST"]),
            Route("/v2/actor-runs/{runId}/log", self.run_log, methods=["GET"]),
            Route("/v2/actor-runs/{runId}/dataset", self.get_dataset, methods=["GET"]),
            Route("/v2/actor-runs/{runId}/dataset/items", self.dataset_items, methods=["GET"]),
            Route("/v2/logs/{buildOrRunId}", self.run_log, methods=["GET"]),
            Route("/v2/datasets/{datasetId}", self.get_dataset, methods=["GET"]),
            Route("/v2/datasets/{datasetId}/items", self.dataset_items, methods=["GET", "HEAD"]),
            Route("/v2/users/me/limits", self.limits, methods=["GET"]),
            Route("/v2/webhooks", self.list_webhooks, methods=["GET"]),
            Route("/v2/webhook-dispatches", self.list_dispatches, methods=["GET"]),
            Route("/v2/webhook-dispatches/{dispatchId}", self.get_dispatch, methods=["GET"]),
        ]
        return routes


@dataclass(frozen=True)
class _StartOptions:
    """A start's query parameters, validated."""

    memory: int
    timeout_secs: int
    max_items: int | None
    max_charge: float | None
    wait: float
    build: str
    hooks: list[dict[str, Any]]


@dataclass(frozen=True)
class _ItemsQuery:
    """A dataset items request's query parameters, validated."""

    fmt: str
    offset: int
    limit: int | None
    desc: bool
    skip_empty: bool
    skip_hidden: bool
    fields: list[str]
    output_fields: list[str]
    omit: set[str]
    flatten: list[str]

    @classmethod
    def parse(cls, request: Request) -> _ItemsQuery:
        q = request.query_params
        fmt = (q.get("format") or "json").lower()
        if fmt not in ("json", "jsonl"):
            raise ApiError.invalid(f"Format '{fmt}' is not supported by the emulator (json, jsonl)")
        clean = parse_bool(q.get("clean"), "clean")
        return cls(
            fmt=fmt,
            offset=parse_int(q.get("offset"), "offset", minimum=0) or 0,
            limit=parse_int(q.get("limit"), "limit", minimum=0),
            desc=parse_bool(q.get("desc"), "desc"),
            skip_empty=clean or parse_bool(q.get("skipEmpty"), "skipEmpty"),
            skip_hidden=clean or parse_bool(q.get("skipHidden"), "skipHidden"),
            fields=parse_list(q.get("fields")),
            output_fields=parse_list(q.get("outputFields")),
            omit=set(parse_list(q.get("omit"))),
            flatten=parse_list(q.get("flatten")),
        )

    def texts(self, script: RunScript, window: range) -> Iterator[str]:
        """The window's rows as JSON text, filtered and shaped (lazily: a page may have
        millions). Rows that need no shaping come as text straight from ``row_texts``."""
        shaped = bool(self.fields or self.omit or self.flatten)
        hidden = self.skip_hidden and script.params.get("hiddenFields")
        fast = None if shaped or hidden else row_texts(script.kind, script.params, window)
        if fast is not None:
            if not self.skip_empty:
                return fast
            return (text for text in fast if text != "{}")
        return (json.dumps(item, ensure_ascii=False) for item in self.items(script, window))

    def items(self, script: RunScript, window: range) -> Iterator[dict[str, Any]]:
        """The window's rows, filtered and shaped, as objects."""
        for index in window:
            item = row(script.kind, script.params, index)
            if self.skip_hidden:
                item = {k: v for k, v in item.items() if not k.startswith("#")}
            if self.skip_empty and not item:
                continue
            yield shape_item(item, self.fields, self.output_fields, self.omit, self.flatten)


def _encode(texts: Iterator[str], fmt: str) -> Iterator[str]:
    """A JSON array or JSON Lines, in chunks so a million-row page never sits in memory."""
    if fmt == "jsonl":
        while chunk := list(islice(texts, ITEMS_CHUNK)):
            yield "\n".join(chunk) + "\n"
        return
    head = "["
    while chunk := list(islice(texts, ITEMS_CHUNK)):
        yield head + ",".join(chunk)
        head = ","
    yield "[]" if head == "[" else "]"


def shape_item(
    item: dict[str, Any],
    fields: list[str],
    output_fields: list[str],
    omit: set[str],
    flatten: list[str],
) -> dict[str, Any]:
    """Apply flatten, fields (+outputFields renames) and omit to one item, in that order."""
    for name in flatten:
        value = item.get(name)
        if isinstance(value, dict):
            item = {k: v for k, v in item.items() if k != name}
            item.update(_flatten(name, value))
    if fields:
        renamed = output_fields if len(output_fields) == len(fields) else fields
        item = {new: item[old] for old, new in zip(fields, renamed, strict=True) if old in item}
    if omit:
        item = {k: v for k, v in item.items() if k not in omit}
    return item


def _flatten(prefix: str, value: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, inner in value.items():
        name = f"{prefix}.{key}"
        if isinstance(inner, dict):
            out.update(_flatten(name, inner))
        else:
            out[name] = inner
    return out
