"""Drive the emulator with the official apify-client (sync and async), unchanged."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from apify_client import ApifyClient, ApifyClientAsync
from apify_client._models import WebhookDispatch
from apify_client._typeddicts import WebhookRepresentationDict
from apify_client.errors import ApifyApiError

from tests.support.waiting import eventually_async

from .conftest import TOKEN, RunningEmulator, WebhookReceiver, client_kwargs

TERMINAL = {"SUCCEEDED", "FAILED", "TIMED-OUT", "ABORTED"}


async def test_start_wait_and_read_all_pages(aclient: ApifyClientAsync) -> None:
    run_input = {
        "brief": "Find SaaS CTOs",
        "icp": {"industry": "SaaS", "size": "50-200"},
        "maxLeads": 23,
    }
    run = await aclient.actor("ultron/leadgen").start(
        run_input=run_input, memory_mbytes=512, run_timeout=timedelta(seconds=120)
    )
    assert run.status in {"READY", "RUNNING"}
    assert run.finished_at is None and run.exit_code is None
    assert run.options.memory_mbytes == 512 and run.options.disk_mbytes == 1024
    assert run.options.timeout_secs == 120
    assert len(run.id) == 17 and run.id.isalnum()

    # Readable at once, then finishes.
    assert (await aclient.run(run.id).get()) is not None
    finished = await aclient.run(run.id).wait_for_finish()
    assert finished is not None
    assert finished.status == "SUCCEEDED"
    assert finished.finished_at is not None and finished.exit_code == 0

    dataset = aclient.dataset(run.default_dataset_id)
    pages: list[dict[str, Any]] = []
    for offset in range(0, 23, 10):
        page = await dataset.list_items(offset=offset, limit=10)
        assert page.total == 23 and page.offset == offset and page.limit == 10
        pages.extend(page.items)
    assert len(pages) == 23
    assert pages[0]["rank"] == 1 and pages[-1]["rank"] == 23
    assert {"name", "company", "title", "email", "score"} <= pages[0].keys()
    assert pages[0]["brief"] == "Find SaaS CTOs" and pages[0]["icp"] == run_input["icp"]

    # Deterministic: a second run with the same input yields the very same rows.
    again = await aclient.actor("ultron~leadgen").call(run_input=run_input, logger=None)
    assert again is not None and again.status == "SUCCEEDED"
    rows = [
        item async for item in aclient.dataset(again.default_dataset_id).iterate_items(chunk_size=7)
    ]
    assert rows == pages
    assert (await aclient.dataset(run.default_dataset_id).get()) is not None


def test_sync_client_call_abort_and_missing(client: ApifyClient) -> None:
    run = client.actor("ultron~similarweb-bulk").call(
        run_input={"domains": ["apify.com", "example.org", "python.org"]}, logger=None
    )
    assert run is not None and run.status == "SUCCEEDED"
    items = client.run(run.id).dataset().list_items().items
    assert [i["domain"] for i in items] == ["apify.com", "example.org", "python.org"]
    assert all(isinstance(i["globalRank"], int) and i["monthlyVisits"] > 0 for i in items)

    hanging = client.actor("ultron~generator").start(run_input={"hang": True, "items": 5})
    aborted = client.run(hanging.id).abort()
    assert aborted.status == "ABORTED" and aborted.finished_at is not None
    assert client.run(hanging.id).abort().status == "ABORTED"  # no-op on a terminal run

    assert client.run("aBcDeFgHiJkLmNoPq").get() is None
    assert client.dataset("aBcDeFgHiJkLmNoPq").get() is None
    with pytest.raises(ApifyApiError) as info:
        client.dataset("aBcDeFgHiJkLmNoPq").list_items()
    assert info.value.status_code == 404 and info.value.type == "record-not-found"

    runs = client.actor("ultron~generator").runs().list(desc=True, limit=5)
    assert runs.items[0].id == hanging.id
    last = client.actor("ultron~generator").last_run().get()
    assert last is not None and last.id == hanging.id


async def test_graceful_abort_goes_through_aborting(aclient: ApifyClientAsync) -> None:
    run = await aclient.actor("ultron~generator").start(run_input={"hang": True})
    await asyncio.sleep(0)  # let the run start before it is aborted
    aborting = await aclient.run(run.id).abort(gracefully=True)
    assert aborting.status in {"ABORTING", "ABORTED"}
    done = await aclient.run(run.id).wait_for_finish()
    assert done is not None and done.status == "ABORTED"


async def test_failed_and_timed_out_runs(aclient: ApifyClientAsync) -> None:
    failed = await aclient.actor("ultron~generator").call(
        run_input={
            "items": 3,
            "durationSecs": 1,
            "finalStatus": "FAILED",
            "failureMessage": "Boom",
        },
        logger=None,
    )
    assert failed is not None and failed.status == "FAILED"
    assert failed.status_message == "Boom" and failed.exit_code == 1

    # Outlives its timeout: RUNNING -> TIMING-OUT -> TIMED-OUT.
    slow = await aclient.actor("ultron~generator").start(
        run_input={"durationSecs": 1000, "items": 100}, run_timeout=timedelta(seconds=4)
    )
    seen: set[str] = set()

    async def status() -> str:
        current = await aclient.run(slow.id).get()
        assert current is not None
        seen.add(current.status)
        return current.status

    while await status() not in TERMINAL:
        await eventually_async(lambda: True)
    assert "TIMING-OUT" in seen or "RUNNING" in seen
    assert (await status()) == "TIMED-OUT"


def test_injected_429_is_retried_transparently(
    client: ApifyClient, server: RunningEmulator
) -> None:
    run = client.actor("ultron~generator").start(run_input={"items": 1})
    before = server.control("GET", "/stats")["data"]["routes"].get("GET /v2/actor-runs/{runId}", 0)
    server.control(
        "POST",
        "/faults/http",
        {"method": "GET", "path": "/v2/actor-runs/*", "status": 429, "count": 2},
    )
    assert client.run(run.id).get() is not None
    after = server.control("GET", "/stats")["data"]["routes"]["GET /v2/actor-runs/{runId}"]
    assert after - before == 3  # two 429s, then the answer


async def test_adhoc_webhook_delivered(
    aclient: ApifyClientAsync, receiver: WebhookReceiver
) -> None:
    hooks: list[WebhookRepresentationDict] = [
        {
            "event_types": ["ACTOR.RUN.SUCCEEDED", "ACTOR.RUN.FAILED"],
            "request_url": f"{receiver.url}/hook/default",
            "headers_template": '{"X-Secret": "s3cret", "X-Run": "{{resource.id}}"}',
            "should_interpolate_strings": True,
            "idempotency_key": "job-default-1",
        },
        {
            "event_types": ["ACTOR.RUN.SUCCEEDED"],
            "request_url": f"{receiver.url}/hook/template",
            "payload_template": '{"runId": {{resource.id}}, "status": {{resource.status}}, '
            '"msg": "run {{resource.id}} done", "data": "{{eventData}}"}',
            "should_interpolate_strings": True,
        },
    ]
    run = await aclient.actor("ultron~generator").start(run_input={"items": 2}, webhooks=hooks)
    default = (await eventually_async(lambda: receiver.for_path("/hook/default")))[0]
    assert default.body["eventType"] == "ACTOR.RUN.SUCCEEDED"
    assert default.body["eventData"]["actorRunId"] == run.id
    assert default.body["resource"]["status"] == "SUCCEEDED"
    assert default.body["resource"]["id"] == run.id
    assert default.headers["content-type"] == "application/json"
    assert default.headers["x-secret"] == "s3cret" and default.headers["x-run"] == run.id
    assert default.headers["x-apify-webhook-dispatch-id"]
    assert default.headers["x-apify-webhook"] and default.headers["x-apify-request-origin"]

    templated = (await eventually_async(lambda: receiver.for_path("/hook/template")))[0]
    assert templated.body["runId"] == run.id and templated.body["status"] == "SUCCEEDED"
    assert templated.body["msg"] == f"run {run.id} done"
    assert templated.body["data"]["actorRunId"] == run.id

    dispatch_id = default.headers["x-apify-webhook-dispatch-id"]

    async def settled_dispatch() -> WebhookDispatch | None:
        # The receiver sees the call before the emulator records its answer, as on the
        # platform, where a dispatch stays ACTIVE until the response is in.
        found = await aclient.webhook_dispatch(dispatch_id).get()
        return found if found is not None and found.status != "ACTIVE" else None

    dispatch = await eventually_async(settled_dispatch)
    assert dispatch.status == "SUCCEEDED"
    assert dispatch.calls and dispatch.calls[0].response_status == 200

    # Ad-hoc webhooks are listed with the account's webhooks, bound to their run.
    listed = await aclient.webhooks().list(desc=True)
    mine = [h for h in listed.items if h.condition.actor_run_id == run.id]
    assert {str(h.request_url) for h in mine} == {
        f"{receiver.url}/hook/default",
        f"{receiver.url}/hook/template",
    }
    assert all(h.is_ad_hoc for h in mine)

    # A retried start with the same idempotencyKey does not create a second webhook.
    again = await aclient.actor("ultron~generator").call(
        run_input={"items": 1}, webhooks=hooks[:1], logger=None
    )
    assert again is not None
    assert not [
        r
        for r in receiver.for_path("/hook/default")
        if r.body["eventData"]["actorRunId"] == again.id
    ]


async def test_webhook_retried_after_failure(
    aclient: ApifyClientAsync, receiver: WebhookReceiver
) -> None:
    receiver.statuses.extend([500, 503])
    hooks: list[WebhookRepresentationDict] = [
        {"event_types": ["ACTOR.RUN.SUCCEEDED"], "request_url": f"{receiver.url}/hook/retry"}
    ]
    run = await aclient.actor("ultron~generator").start(run_input={"items": 1}, webhooks=hooks)
    calls = await eventually_async(
        lambda: (
            [r for r in receiver.for_path("/hook/retry") if r.body["resource"]["id"] == run.id]
            if len(receiver.for_path("/hook/retry")) >= 3
            else None
        )
    )
    ids = {c.headers["x-apify-webhook-dispatch-id"] for c in calls}
    assert len(calls) == 3 and len(ids) == 1

    # The emulator records a call once its answer is in: wait for the third to be recorded.
    dispatch_id = ids.pop()

    async def delivered() -> Any:
        dispatch = await aclient.webhook_dispatch(dispatch_id).get()
        assert dispatch is not None
        return dispatch if dispatch.status == "SUCCEEDED" else None

    dispatch = await eventually_async(delivered, timeout=5)
    assert [c.response_status for c in dispatch.calls or []] == [500, 503, 200]


def test_big_input_is_gzipped_and_decoded(client: ApifyClient) -> None:
    brief = "enterprise buyers " * 200  # > 1 KiB, so the client gzips the body
    run = client.actor("ultron~leadgen").call(
        run_input={"brief": brief, "maxLeads": 2}, logger=None
    )
    assert run is not None and run.stats.input_body_len is not None
    items = client.dataset(run.default_dataset_id).list_items().items
    assert items[0]["brief"] == brief


def test_lost_start_answer_creates_run_anyway(server: RunningEmulator) -> None:
    client = ApifyClient(TOKEN, **client_kwargs(server.url))
    runs_before = client.actor("ultron~generator").runs().list().total
    server.control("POST", "/faults/lost-start", {"count": 1, "mode": "close"})
    run = client.actor("ultron~generator").start(run_input={"items": 1})
    # The client retried the lost POST, so the platform now has two runs for one start().
    runs = client.actor("ultron~generator").runs().list(desc=True)
    assert runs.total == runs_before + 2
    assert runs.items[0].id == run.id
