"""Ad-hoc webhooks: validation at run start, template rendering, and delivery with retries.

A background ticker replays each run's timeline phases that it has not yet
emitted (see `state.py`), creates a WebhookDispatch per matching webhook, and
delivers it in its own task with exponential back-off. Phases are emitted at
most once per run (the counter is persisted), so a restart does not re-fire
old events; the trade-off is at-most-once *creation* across a crash between
emitting and persisting, which is acceptable for a test double.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import re
import time
from collections.abc import Mapping
from typing import Any

import httpx

from apify_emulator.actors import TERMINAL_STATUSES
from apify_emulator.config import EmulatorConfig
from apify_emulator.errors import ApiError
from apify_emulator.faults import Faults, Stats
from apify_emulator.state import EVENT_FOR_STATUS, Phase, RunRecord, Store
from apify_emulator.util import iso, new_id

log = logging.getLogger(__name__)

EVENT_TYPES = frozenset(
    {
        "ACTOR.RUN.CREATED",
        "ACTOR.RUN.SUCCEEDED",
        "ACTOR.RUN.FAILED",
        "ACTOR.RUN.ABORTED",
        "ACTOR.RUN.TIMED_OUT",
        "ACTOR.RUN.RESURRECTED",
        "ACTOR.BUILD.CREATED",
        "ACTOR.BUILD.SUCCEEDED",
        "ACTOR.BUILD.FAILED",
        "ACTOR.BUILD.ABORTED",
        "ACTOR.BUILD.TIMED_OUT",
        "TEST",
    }
)
TEMPLATE_VARIABLES = frozenset(
    {"userId", "createdAt", "eventType", "eventData", "resource", "globals"}
)
_VAR = re.compile(r"\{\{\s*([A-Za-z_][\w.]*)\s*\}\}")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
TICK_SECS = 0.02
MAX_RESPONSE_BODY = 1000


# ---- parsing & validation ----------------------------------------------------
def parse_webhooks_param(raw: str | None) -> list[dict[str, Any]]:
    """Decode the `webhooks` query param: base64 (standard or URL-safe) of a JSON array."""
    if not raw:
        return []
    try:
        padded = raw + "=" * (-len(raw) % 4)
        decoded = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
        hooks = json.loads(decoded)
    except (binascii.Error, ValueError):
        raise ApiError.invalid("Parameter 'webhooks' must be a base64-encoded JSON array") from None
    if not isinstance(hooks, list):
        raise ApiError.invalid("Parameter 'webhooks' must be a base64-encoded JSON array")
    return [validate_webhook(h, i) for i, h in enumerate(hooks)]


def validate_webhook(hook: Any, index: int) -> dict[str, Any]:
    where = f"webhooks[{index}]"
    if not isinstance(hook, dict):
        raise ApiError.invalid(f"{where} must be an object")
    events = hook.get("eventTypes")
    if not isinstance(events, list) or not events or not all(e in EVENT_TYPES for e in events):
        raise ApiError.invalid(
            f"{where}.eventTypes must be a non-empty array of webhook event types"
        )
    url = hook.get("requestUrl")
    if not isinstance(url, str) or not re.match(r"^https?://[^\s/]+", url):
        raise ApiError.invalid(f"{where}.requestUrl must be an http(s) URL")
    for key in ("payloadTemplate", "headersTemplate"):
        template = hook.get(key)
        if template is None:
            continue
        if not isinstance(template, str):
            raise ApiError.invalid(f"{where}.{key} must be a string")
        for var in _VAR.findall(template):
            if var.split(".")[0] not in TEMPLATE_VARIABLES:
                raise ApiError.invalid(f"{where}.{key} uses unknown variable '{var}'")
        try:
            json.loads(_VAR.sub("null", template))
        except ValueError:
            raise ApiError.invalid(
                f"{where}.{key} must be valid JSON apart from variables"
            ) from None
    return {
        "eventTypes": list(events),
        "requestUrl": url,
        "payloadTemplate": hook.get("payloadTemplate"),
        "headersTemplate": hook.get("headersTemplate"),
        "shouldInterpolateStrings": bool(hook.get("shouldInterpolateStrings", False)),
        "idempotencyKey": hook.get("idempotencyKey"),
        "ignoreSslErrors": bool(hook.get("ignoreSslErrors", False)),
        "doNotRetry": bool(hook.get("doNotRetry", False)),
    }


# ---- templates -----------------------------------------------------------------
def _lookup(context: Mapping[str, Any], path: str) -> Any:
    value: Any = context
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def render_template(template: str, context: Mapping[str, Any], interpolate_strings: bool) -> Any:
    """Apify template semantics: `{{var}}` outside strings becomes the JSON value; inside
    strings only with shouldInterpolateStrings (exact "{{var}}" -> raw value, else text)."""
    out: list[str] = []
    pos = 0
    for match in _STRING.finditer(template):
        out.append(
            _VAR.sub(
                lambda m: json.dumps(_lookup(context, m.group(1))), template[pos : match.start()]
            )
        )
        literal = match.group(0)
        if interpolate_strings and _VAR.search(literal):
            whole = _VAR.fullmatch(literal[1:-1])
            if whole:
                literal = json.dumps(_lookup(context, whole.group(1)))
            else:
                text = json.loads(literal)

                def as_text(m: re.Match[str]) -> str:
                    value = _lookup(context, m.group(1))
                    return value if isinstance(value, str) else json.dumps(value)

                literal = json.dumps(_VAR.sub(as_text, text))
        out.append(literal)
        pos = match.end()
    out.append(_VAR.sub(lambda m: json.dumps(_lookup(context, m.group(1))), template[pos:]))
    return json.loads("".join(out))


# ---- dispatcher ----------------------------------------------------------------
#: Webhook calls in flight at once; the others wait their turn before their call starts.
#: Unbounded, a fan-out of 1,000 runs queued its calls inside httpx's connection pool,
#: whose every hand-over scans the whole queue: the emulator spent its CPU there and the
#: queued calls ran out their timeout before being sent (a call's timeout is the target's
#: time to answer, not the sender's queue).
WEBHOOK_CONCURRENCY = 64


class WebhookDispatcher:
    def __init__(self, cfg: EmulatorConfig, store: Store, faults: Faults, stats: Stats) -> None:
        self.cfg = cfg
        self.store = store
        self.faults = faults
        self.stats = stats
        self._tasks: set[asyncio.Task[None]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._client: httpx.AsyncClient | None = None
        self._insecure_client: httpx.AsyncClient | None = None
        self._pending: set[str] = set()
        self._sending = asyncio.Semaphore(WEBHOOK_CONCURRENCY)

    async def start(self) -> None:
        self._client = httpx.AsyncClient(
            timeout=self.cfg.webhook_timeout_secs,
            limits=httpx.Limits(max_connections=WEBHOOK_CONCURRENCY),
        )
        now = time.time()
        self._pending = {r.id for r in self.store.runs.values() if not self._done(r, now)}
        # Resume deliveries that were still ACTIVE when the previous process stopped.
        for dispatch in self.store.dispatches.values():
            if dispatch["status"] == "ACTIVE":
                self._spawn(self._deliver(dispatch, []))
        self._ticker = asyncio.create_task(self._tick_loop(), name="webhook-ticker")

    async def stop(self) -> None:
        tasks = [*self._tasks, *([self._ticker] if self._ticker else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for client in (self._client, self._insecure_client):
            if client is not None:
                await client.aclose()

    def watch(self, run: RunRecord) -> None:
        """Called when a run is created or its timeline changes (abort)."""
        self._pending.add(run.id)
        self._wake.set()

    def forget_all(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._pending.clear()

    def _done(self, run: RunRecord, now: float) -> bool:
        phases = run.timeline(self.cfg)
        return run.emitted >= len(phases) and phases[-1].status in TERMINAL_STATUSES

    async def _tick_loop(self) -> None:
        while True:
            try:
                self.tick(time.time())
            except Exception:
                log.exception("webhook ticker failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK_SECS)
            self._wake.clear()

    def tick(self, now: float) -> None:
        for run_id in list(self._pending):
            run = self.store.runs.get(run_id)
            if run is None:
                self._pending.discard(run_id)
                continue
            phases = run.timeline(self.cfg)
            changed = False
            while run.emitted < len(phases) and phases[run.emitted].at <= now:
                self._emit(run, phases[run.emitted])
                run.emitted += 1
                changed = True
            if changed:
                self.store.save_run(run)
            if run.emitted >= len(phases) and phases[-1].status in TERMINAL_STATUSES:
                self._pending.discard(run_id)

    def _emit(self, run: RunRecord, phase: Phase) -> None:
        event_type = EVENT_FOR_STATUS.get(phase.status)
        if event_type is None:
            return
        log.info("run %s -> %s", run.id, phase.status)
        for hook in run.webhooks:
            if event_type not in hook["eventTypes"]:
                continue
            faults = self.faults.take_webhook(event_type)
            if any(f.action == "drop" for f in faults):
                log.info("fault: dropping %s webhook for run %s", event_type, run.id)
                continue
            dispatch = self._new_dispatch(run, hook, event_type, phase)
            self._spawn(
                self._deliver(
                    dispatch, [f.action for f in faults], sum(f.delaySecs for f in faults)
                )
            )

    def _new_dispatch(
        self, run: RunRecord, hook: dict[str, Any], event_type: str, phase: Phase
    ) -> dict[str, Any]:
        event_data = {"actorId": run.actor_id, "actorRunId": run.id, "actorTaskId": None}
        context = {
            "userId": run.user_id,
            "createdAt": iso(phase.at),
            "eventType": event_type,
            "eventData": event_data,
            "resource": run.to_api(self.cfg, phase.at),
            "globals": {"dateISO": iso(time.time()), "dateUnix": int(time.time() * 1000)},
        }
        dispatch: dict[str, Any] = {
            "id": new_id(),
            "userId": run.user_id,
            "webhookId": hook["id"],
            "createdAt": iso(time.time()),
            "status": "ACTIVE",
            "eventType": event_type,
            "eventData": event_data,
            "webhook": {
                "actionType": "HTTP_REQUEST",
                "condition": {"actorRunId": run.id},
                "requestUrl": hook["requestUrl"],
                "isAdHoc": True,
            },
            "calls": [],
            # Emulator-private: the rendered request, so a restart can resume delivery.
            "_request": self._render(hook, context),
        }
        self.store.save_dispatch(dispatch)
        return dispatch

    def _render(self, hook: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        interpolate = bool(hook.get("shouldInterpolateStrings"))
        error = None
        payload: Any = {
            k: context[k] for k in ("userId", "createdAt", "eventType", "eventData", "resource")
        }
        headers: dict[str, str] = {}
        try:
            if hook.get("payloadTemplate"):
                payload = render_template(hook["payloadTemplate"], context, interpolate)
            if hook.get("headersTemplate"):
                rendered = render_template(hook["headersTemplate"], context, interpolate)
                if not isinstance(rendered, dict) or not all(
                    isinstance(v, str) for v in rendered.values()
                ):
                    raise ValueError("headersTemplate must render to an object of strings")
                headers = rendered
        except ValueError as exc:
            error = f"Invalid webhook template: {exc}"
        return {
            "url": hook["requestUrl"],
            "body": json.dumps(payload),
            "headers": headers,
            "doNotRetry": bool(hook.get("doNotRetry")),
            "ignoreSslErrors": bool(hook.get("ignoreSslErrors")),
            "error": error,
        }

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _http(self, insecure: bool) -> httpx.AsyncClient:
        if not insecure:
            assert self._client is not None
            return self._client
        if self._insecure_client is None:
            self._insecure_client = httpx.AsyncClient(
                timeout=self.cfg.webhook_timeout_secs,
                verify=False,  # noqa: S501 - ignoreSslErrors
            )
        return self._insecure_client

    async def _deliver(
        self, dispatch: dict[str, Any], actions: list[str], extra_delay: float = 0.0
    ) -> None:
        request = dispatch["_request"]
        if extra_delay > 0:
            await asyncio.sleep(extra_delay)
        # System headers always win over the headers template.
        headers = {
            k: v
            for k, v in request["headers"].items()
            if k.lower()
            not in {
                "host",
                "content-type",
                "x-apify-webhook",
                "x-apify-webhook-dispatch-id",
                "x-apify-request-origin",
            }
        }
        headers.update(
            {
                "Content-Type": "application/json",
                "X-Apify-Webhook": dispatch["webhookId"],
                "X-Apify-Webhook-Dispatch-Id": dispatch["id"],
                "X-Apify-Request-Origin": "WEBHOOK",
            }
        )
        attempts = 1 if request["doNotRetry"] else max(1, self.cfg.webhook_max_attempts)
        while len(dispatch["calls"]) < attempts:
            ok = await self._call(dispatch, request, headers)
            if ok:
                dispatch["status"] = "SUCCEEDED"
                self.store.save_dispatch(dispatch)
                if "duplicate" in actions:
                    log.info("fault: duplicating webhook dispatch %s", dispatch["id"])
                    await self._call(dispatch, request, headers, record=False)
                return
            if len(dispatch["calls"]) >= attempts:
                break
            retry = len(dispatch["calls"]) - 1
            await asyncio.sleep(self.cfg.scaled(self.cfg.webhook_retry_base_secs) * 2**retry)
        dispatch["status"] = "FAILED"
        self.store.save_dispatch(dispatch)
        log.warning(
            "webhook dispatch %s to %s failed after %d calls",
            dispatch["id"],
            request["url"],
            len(dispatch["calls"]),
        )

    async def _call(
        self,
        dispatch: dict[str, Any],
        request: dict[str, Any],
        headers: dict[str, str],
        *,
        record: bool = True,
    ) -> bool:
        async with self._sending:
            call = await self._post(request, headers)
        ok = call["responseStatus"] is not None and 200 <= call["responseStatus"] < 300
        self.stats.webhook_calls["ok" if ok else "failed"] += 1
        if record:
            dispatch["calls"].append(call)
            self.store.save_dispatch(dispatch)
        return ok

    async def _post(self, request: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        """One call to the target, as the dispatch records it."""
        call: dict[str, Any] = {
            "startedAt": iso(time.time()),
            "finishedAt": None,
            "errorMessage": None,
            "responseStatus": None,
            "responseBody": None,
        }
        if request.get("error"):
            call["errorMessage"] = request["error"]
        else:
            try:
                response = await self._http(request["ignoreSslErrors"]).post(
                    request["url"], content=request["body"], headers=headers
                )
                call["responseStatus"] = response.status_code
                call["responseBody"] = response.text[:MAX_RESPONSE_BODY]
                if not 200 <= response.status_code < 300:
                    call["errorMessage"] = f"Webhook target responded {response.status_code}"
            except httpx.HTTPError as exc:
                call["errorMessage"] = f"Cannot send request: {exc!r}"
        call["finishedAt"] = iso(time.time())
        return call


def public_dispatch(dispatch: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in dispatch.items() if not k.startswith("_")}
