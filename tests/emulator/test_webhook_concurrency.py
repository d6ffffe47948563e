"""The emulator's webhook calls: never more in flight than its cap, every one delivered."""

from __future__ import annotations

import asyncio

import httpx

from apify_emulator.config import EmulatorConfig
from apify_emulator.faults import Faults, Stats
from apify_emulator.state import Store
from apify_emulator.webhooks import WEBHOOK_CONCURRENCY, WebhookDispatcher


async def test_calls_beyond_the_cap_wait_their_turn_and_all_arrive() -> None:
    received = in_flight = most_in_flight = 0

    async def slow_target(request: httpx.Request) -> httpx.Response:
        nonlocal received, in_flight, most_in_flight
        in_flight += 1
        most_in_flight = max(most_in_flight, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        received += 1
        return httpx.Response(200, text="ok")

    cfg = EmulatorConfig()
    dispatcher = WebhookDispatcher(cfg, Store(cfg), Faults(cfg.fault_seed), Stats())
    dispatcher._client = httpx.AsyncClient(transport=httpx.MockTransport(slow_target))
    request = {"url": "http://receiver.test/hook", "body": b"{}", "ignoreSslErrors": False}
    calls = 3 * WEBHOOK_CONCURRENCY
    results = await asyncio.gather(
        *(dispatcher._call({"calls": []}, request, {}, record=False) for _ in range(calls))
    )
    assert all(results) and received == calls
    assert most_in_flight == WEBHOOK_CONCURRENCY
    await dispatcher._client.aclose()
