"""The webhook fast path over real HTTP in both directions, and its backstop."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from orchestrator.cli.devstack import DevStack
from orchestrator.platform.webhook_auth import WEBHOOK_TOKEN_HEADER, derive_webhook_token

from .conftest import E2E_EMULATOR_TIME_SCALE, E2E_ENV, free_stack_ports
from .support import (
    api_client,
    event_kinds,
    events,
    generator,
    request,
    settled_run,
    submit,
    wait_terminal,
)

pytestmark = pytest.mark.e2e

SLOW_POLL_SECONDS = 120
DEFAULT_WEBHOOK_SECRET = "local-development-webhook-secret"


@pytest.fixture(scope="module")
def slow_poll_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    """A stack whose poll interval is long, so only a webhook can end a run quickly."""
    dev_stack = DevStack(
        tmp_path_factory.mktemp("slow-poll"),
        free_stack_ports(),
        extra_env=E2E_ENV | {"ORCHESTRATOR_POLL_INTERVAL_SECONDS": str(SLOW_POLL_SECONDS)},
        emulator_time_scale=E2E_EMULATOR_TIME_SCALE,
        temporal_ui=False,
    )
    with dev_stack:
        yield dev_stack


def poll_reasons(api: httpx.Client, run_id: str) -> list[str]:
    return [e["data"]["reason"] for e in events(api, run_id) if e["kind"] == "child.poll"]


def test_the_webhook_ends_a_run_long_before_the_poll_interval(slow_poll_stack: DevStack) -> None:
    with api_client(slow_poll_stack) as api:
        # 10 s scripted (2 s at the stack's time scale): longer than the first long poll.
        run_id = submit(api, request(generator(items=2_500, durationSecs=10)))
        # Well within one poll interval: only the webhook can have woken the poller.
        run = wait_terminal(api, run_id, timeout=SLOW_POLL_SECONDS / 4)
        assert run["state"] == "succeeded" and run["itemsTotal"] == 2_500
        assert poll_reasons(api, run_id)[-1] == "webhook"
        kinds = event_kinds(api, run_id)
        assert kinds["child.webhook"] == 1
        # Economy on the webhook path: at most 3 + ceil(items / page size) platform calls.
        (child,) = run["children"]
        calls = child["platformCalls"]
        assert calls["start"] == 1 and calls["datasetPage"] == 3
        assert sum(calls.values()) <= 3 + math.ceil(2_500 / 1_000)


def test_with_webhooks_dropped_the_run_completes_on_the_poll(
    stack: DevStack, emulator: httpx.Client
) -> None:
    emulator.post("/_emulator/faults/webhooks", json={"action": "drop", "count": None})
    with api_client(stack) as api:
        run_id = submit(api, request(generator(items=40, durationSecs=10)))
        run = wait_terminal(api, run_id)
        assert run["state"] == "succeeded" and run["itemsTotal"] == 40
        assert event_kinds(api, run_id)["child.webhook"] == 0
        assert poll_reasons(api, run_id)[-1] == "interval"


def test_duplicated_webhooks_change_nothing(stack: DevStack, emulator: httpx.Client) -> None:
    emulator.post("/_emulator/faults/webhooks", json={"action": "duplicate", "count": None})
    with api_client(stack) as api:
        run_id = submit(api, request(generator(items=15, durationSecs=10)))
        run = wait_terminal(api, run_id)
        assert run["state"] == "succeeded" and run["itemsTotal"] == 15
        webhook_events = [e for e in events(api, run_id) if e["kind"] == "child.webhook"]
        dispatch_ids = [e["data"]["dispatchId"] for e in webhook_events]
        assert len(dispatch_ids) == len(set(dispatch_ids)), "a dispatch was recorded twice"


def webhook_secret(stack: DevStack) -> str:
    return stack.env.get("ORCHESTRATOR_WEBHOOK_SECRET", DEFAULT_WEBHOOK_SECRET)


def post_webhook(
    stack: DevStack,
    child_id: str,
    body: bytes,
    token: str | None,
    dispatch_id: str = "dispatch-1",
) -> httpx.Response:
    headers = {"Content-Type": "application/json", "X-Apify-Webhook-Dispatch-Id": dispatch_id}
    if token is not None:
        headers[WEBHOOK_TOKEN_HEADER] = token
    return httpx.post(
        f"{stack.urls['api']}/webhooks/platform",
        params={"child": child_id},
        content=body,
        headers=headers,
        timeout=30,
    )


def payload(run_id: str = "x", event: str = "ACTOR.RUN.SUCCEEDED") -> bytes:
    body: dict[str, Any] = {"eventType": event, "resource": {"id": run_id, "status": "SUCCEEDED"}}
    return json.dumps(body).encode()


def test_the_receiver_rejects_what_it_cannot_trust_with_no_side_effect(stack: DevStack) -> None:
    secret = webhook_secret(stack)
    with api_client(stack) as api:
        run_id = submit(api, request(generator(items=3, durationSecs=1)))
        # Settled: the usage read after the run's end is its last event, so nothing else
        # is still on its way when the forged webhooks are counted.
        run = settled_run(api, run_id)
        child = run["children"][0]["id"]
        before = len(events(api, run_id))
        good = derive_webhook_token(secret, child)
        cases = [
            (post_webhook(stack, child, payload(), None), 401),
            (post_webhook(stack, child, payload(), "0" * 64), 401),
            (post_webhook(stack, child, payload(), derive_webhook_token(secret, child + "x")), 401),
            (
                post_webhook(
                    stack, child + "x", payload(), derive_webhook_token(secret, child + "x")
                ),
                404,
            ),
            (post_webhook(stack, child, b"{not json", good), 400),
            (post_webhook(stack, child, b"[1, 2]", good), 400),
            (post_webhook(stack, child, b"{" + b" " * 600_000 + b"}", good), 413),
            (post_webhook(stack, child, payload("someOtherRunId"), good), 409),
        ]
        for response, status in cases:
            assert response.status_code == status, response.text
            assert response.headers["content-type"].startswith("application/problem+json")
        assert len(events(api, run_id)) == before
        # A genuine but late webhook (the child has finished) is accepted and harmless.
        platform_run = run["children"][0]["platformRunId"]
        late = post_webhook(stack, child, payload(platform_run), good, dispatch_id="late-1")
        assert late.status_code == 202
        again = post_webhook(stack, child, payload(platform_run), good, dispatch_id="late-1")
        assert again.status_code == 202
        assert event_kinds(api, run_id)["child.webhook"] <= 2  # the run's own + "late-1" once
        assert wait_terminal(api, run_id)["state"] == "succeeded"
