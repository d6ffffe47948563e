"""``POST /webhooks/platform``: the platform's ad-hoc webhooks wake the child's poller.

The route only translates HTTP into a :class:`PlatformWebhook` command; authentication,
limits and the rules of what is recorded live in ``service.webhooks``. The body is read
(at most the service's limit, never buffered past it) only once the token has been checked.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from orchestrator.api.deps import State
from orchestrator.platform.webhook_auth import WEBHOOK_CHILD_PARAM, WEBHOOK_TOKEN_HEADER
from orchestrator.service.commands import BodyReader, PlatformWebhook
from orchestrator.service.webhooks import receive_platform_webhook

router = APIRouter(tags=["webhooks"])


def _body_reader(request: Request) -> BodyReader:
    async def read_at_most(limit: int) -> bytes | None:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            return None
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    return read_at_most


@router.post(
    "/webhooks/platform",
    status_code=202,
    summary="Receiver of platform webhooks.",
    responses={
        202: {
            "description": "Recorded; the actor run's poller is woken.",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    },
    # Read by hand (the token is checked before the body is), so declared by hand.
    openapi_extra={
        "parameters": [
            {
                "name": WEBHOOK_CHILD_PARAM,
                "in": "query",
                "required": True,
                "schema": {"type": "string"},
                "description": "The actor run the webhook was registered for.",
            },
            {
                "name": WEBHOOK_TOKEN_HEADER,
                "in": "header",
                "required": True,
                "schema": {"type": "string"},
                "description": "The token the orchestrator put in the webhook's headers.",
            },
        ],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"type": "object"}}},
        },
    },
)
async def platform_webhook(request: Request, state: State) -> JSONResponse:
    hook = PlatformWebhook(
        child_id=request.query_params.get(WEBHOOK_CHILD_PARAM, ""),
        token=request.headers.get(WEBHOOK_TOKEN_HEADER, ""),
        dispatch_id=request.headers.get("X-Apify-Webhook-Dispatch-Id", ""),
        read_body=_body_reader(request),
    )
    secret = state.settings.secret("webhook_secret")
    await receive_platform_webhook(state.engine, state.temporal, secret, hook)
    return JSONResponse({"accepted": True}, status_code=202)
