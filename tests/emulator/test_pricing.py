"""Pricing models, usage and the charge caps, driven with the official apify-client."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from typing import Any

import httpx
import pytest
from apify_client import ApifyClient, ApifyClientAsync
from apify_client.errors import ApifyApiError

from apify_emulator import create_app
from apify_emulator.actors import LEADGEN_PRICING, find_actor
from apify_emulator.pricing import USD_PER_COMPUTE_UNIT, USD_PER_DATASET_WRITE, Pricing
from apify_emulator.state import RunRecord
from orchestrator.config.bootstrap import bundled_registry_text
from orchestrator.db.queries.registry import ActorEntry, load_registry_file
from tests.support.waiting import eventually_async

from .conftest import (
    AUTH,
    TIME_SCALE,
    TOKEN,
    RunningEmulator,
    client_kwargs,
    local,
    make_config,
    start_emulator,
)
from .test_openapi_spec import check

LEADS = {"brief": {"product": "Payroll", "targetCount": 50}, "icp": {"titles": ["CFO"]}}
DOMAINS = [f"site{i}.example" for i in range(10)]
# A long usage lag (40 s scaled = 2 s) so a read right after the end surely sees it unsettled.
SETTLE_SECS = 40.0


@pytest.fixture(scope="module")
def lagging() -> Iterator[RunningEmulator]:
    running = start_emulator(make_config(usage_lag_secs=SETTLE_SECS))
    yield running
    running.stop()


def raw(server: RunningEmulator, run_id: str) -> dict[str, Any]:
    """The run as the API sends it (the client's models would hide absent vs null)."""
    response = httpx.get(f"{server.url}/v2/actor-runs/{run_id}", headers=AUTH, timeout=10)
    response.raise_for_status()
    data: dict[str, Any] = response.json()["data"]
    return data


def settled(server: RunningEmulator, run_id: str) -> dict[str, Any]:
    """The finished run read once its usage lag has passed; a later read shows the same."""
    cfg = server.emulator.cfg
    run = raw(server, run_id)
    assert run["finishedAt"] is not None
    finished = datetime.fromisoformat(run["finishedAt"].replace("Z", "+00:00")).timestamp()
    # Waiting out the documented lag, not asserting a duration.
    while time.time() < finished + cfg.scaled(cfg.usage_lag_secs) + 0.01:
        time.sleep(0.02)
    first = raw(server, run_id)
    later = raw(server, run_id)
    for key in ("usage", "usageUsd", "usageTotalUsd", "chargedEventCounts"):
        assert first.get(key) == later.get(key), key
    return first


def test_every_actor_shows_its_pricing_model(client: ApifyClient) -> None:
    models = {
        "leadgen": "PAY_PER_EVENT",
        "similarweb-bulk": "PRICE_PER_DATASET_ITEM",
        "generator": "FREE",
        "generator-rental": "FLAT_PRICE_PER_MONTH",
    }
    for name, model in models.items():
        actor = client.actor(f"ultron/{name}").get()
        assert actor is not None and actor.pricing_infos is not None
        assert [p.pricing_model for p in actor.pricing_infos] == [model], name

    leadgen = client.actor("ultron/leadgen").get()
    assert leadgen is not None and leadgen.pricing_infos
    info: Any = leadgen.pricing_infos[0]
    events = info.pricing_per_event.actor_charge_events
    assert set(events) == {"apify-actor-start", "lead"}
    assert events["lead"].is_primary_event and events["lead"].event_price_usd == 0.01
    similarweb = client.actor("ultron/similarweb-bulk").get()
    assert similarweb is not None and similarweb.pricing_infos
    per_item: Any = similarweb.pricing_infos[0]
    assert per_item.unit_name == "result" and per_item.price_per_unit_usd == 0.002

    # Each run carries its actor's pricing record.
    run = client.actor("ultron/leadgen").call(run_input={**LEADS, "maxLeads": 3}, logger=None)
    assert run is not None and run.pricing_info is not None
    assert run.pricing_info.pricing_model == "PAY_PER_EVENT"
    assert run.pricing_info == info


def test_pay_per_event_run_is_charged_per_lead_and_start(
    client: ApifyClient, server: RunningEmulator
) -> None:
    run = client.actor("ultron/leadgen").call(
        run_input={**LEADS, "maxLeads": 7}, memory_mbytes=4096, logger=None
    )
    assert run is not None and run.status == "SUCCEEDED"
    final = settled(server, run.id)
    # One synthetic start event per GB of memory, one `lead` per row; no platform usage bill.
    assert final["chargedEventCounts"] == {"apify-actor-start": 4, "lead": 7}
    assert final["usageTotalUsd"] == pytest.approx(4 * 0.00005 + 7 * 0.01)
    assert final["usageUsd"] is None
    assert final["usage"]["DATASET_WRITES"] == 7 and final["usage"]["ACTOR_COMPUTE_UNITS"] > 0


def test_charge_limit_stops_rows_and_the_platform_aborts_the_run(
    client: ApifyClient, server: RunningEmulator
) -> None:
    run = client.actor("ultron/leadgen").call(
        run_input=LEADS, max_total_charge_usd=Decimal("0.1"), logger=None
    )
    assert run is not None
    assert run.options.max_total_charge_usd == 0.1
    # $0.1 pays the start event ($0.00005) and 9 leads at $0.01; the 10th charge fails.
    assert run.status == "ABORTED" and run.exit_code == 1
    assert run.status_message is not None and "maxTotalChargeUsd" in run.status_message
    items = client.dataset(run.default_dataset_id).list_items().items
    assert [item["rank"] for item in items] == list(range(1, 10))
    final = settled(server, run.id)
    assert final["chargedEventCounts"] == {"apify-actor-start": 1, "lead": 9}
    assert final["usageTotalUsd"] == pytest.approx(0.09005)
    assert final["usageTotalUsd"] <= 0.1

    # The limit is a pay-per-event one: other models ignore it (it is still recorded).
    free = client.actor("ultron/generator").call(
        run_input={"items": 30}, max_total_charge_usd=Decimal("0.000001"), logger=None
    )
    assert free is not None and free.status == "SUCCEEDED"
    assert free.options.max_total_charge_usd == 0.000001
    assert client.dataset(free.default_dataset_id).list_items().total == 30


def test_max_items_caps_the_rows_and_the_bill(client: ApifyClient, server: RunningEmulator) -> None:
    run = client.actor("ultron/similarweb-bulk").call(
        run_input={"domains": DOMAINS}, max_items=4, logger=None
    )
    assert run is not None and run.status == "SUCCEEDED" and run.options.max_items == 4
    assert run.status_message is not None and "maxItems" in run.status_message
    items = client.dataset(run.default_dataset_id).list_items().items
    assert [item["domain"] for item in items] == DOMAINS[:4]
    # The actor stops at the cap and finishes on its own, sooner than the full run.
    assert server.emulator.store.runs[run.id].script.duration_secs == pytest.approx(3.0 * 4 / 10)
    final = settled(server, run.id)
    assert final["usageTotalUsd"] == pytest.approx(4 * 0.002)
    assert final["usageUsd"] is None and "chargedEventCounts" not in final


def test_rented_and_free_runs_pay_platform_usage(
    client: ApifyClient, server: RunningEmulator
) -> None:
    for name in ("generator", "generator-rental"):
        run = client.actor(f"ultron/{name}").call(
            run_input={"items": 20, "durationSecs": 2}, memory_mbytes=2048, logger=None
        )
        assert run is not None and run.status == "SUCCEEDED"
        final = settled(server, run.id)
        assert "chargedEventCounts" not in final
        units = final["usage"]["ACTOR_COMPUTE_UNITS"]
        assert units > 0 and final["usage"]["DATASET_WRITES"] == 20
        assert final["usageUsd"] == {
            "ACTOR_COMPUTE_UNITS": pytest.approx(units * USD_PER_COMPUTE_UNIT, abs=1e-6),
            "DATASET_WRITES": pytest.approx(20 * USD_PER_DATASET_WRITE),
        }
        assert final["usageTotalUsd"] == pytest.approx(sum(final["usageUsd"].values()), abs=1e-6)
        assert final["stats"]["computeUnits"] == units


async def test_usage_grows_then_settles_and_stays(lagging: RunningEmulator) -> None:
    client = ApifyClientAsync(TOKEN, **client_kwargs(lagging.url))
    started = await client.actor("ultron/leadgen").start(
        run_input={**LEADS, "maxLeads": 40, "durationSecs": 60}, memory_mbytes=1024
    )
    run = client.run(started.id)

    async def charged() -> float:
        got = await run.get()
        assert got is not None and got.usage_total_usd is not None
        return got.usage_total_usd

    first = await charged()

    async def grown() -> bool:
        return await charged() > first

    await eventually_async(grown)

    done = await run.wait_for_finish()
    assert done is not None and done.status == "SUCCEEDED"
    right_after = await charged()
    final = 0.00005 + 40 * 0.01
    # The figure lags the run, so right after the end it is still short of the final one ...
    assert right_after < final - 1e-9

    async def at_final() -> bool:
        return abs(await charged() - final) < 1e-9

    await eventually_async(at_final)
    # ... then it settles and never changes again.
    again = await run.get()
    assert again is not None and again.usage_total_usd == pytest.approx(final)
    assert again.charged_event_counts == {"apify-actor-start": 1, "lead": 40}


async def test_usage_is_a_function_of_time_that_settles() -> None:
    """The same facts read at exact instants from the run's record (no clock in the way)."""
    cfg = make_config(usage_lag_secs=4.0)
    app = create_app(cfg)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://e", headers=AUTH) as http:
        started = await http.post(
            "/v2/actors/ultron~generator/runs",
            params={"memory": 2048},
            json={"items": 100, "durationSecs": 10},
        )
        assert started.status_code == 201
        record: RunRecord = app.state.emulator.store.runs[started.json()["data"]["id"]]
    k = TIME_SCALE
    start = record.started_at
    end = start + (cfg.ready_secs + 10) * k
    lag = cfg.usage_lag_secs * k

    def at(t: float) -> dict[str, Any]:
        return record.to_api(cfg, t)

    during = [at(start + s * k) for s in (5, 8, 10)]
    totals = [d["usageTotalUsd"] for d in during]
    assert totals == sorted(totals) and totals[0] < totals[-1]
    assert at(end)["status"] == "SUCCEEDED"
    assert at(end)["usageTotalUsd"] < at(end + lag)["usageTotalUsd"]
    final = at(end + lag)
    assert final["usage"] == at(end + 1000)["usage"]
    assert final["usageTotalUsd"] == at(end + 1000)["usageTotalUsd"]
    assert final["usage"]["DATASET_WRITES"] == 100
    assert final["usage"]["ACTOR_COMPUTE_UNITS"] == pytest.approx(
        2 * (end - start) / 3600, abs=1e-6
    )
    # Without a token the money is hidden, the counts are not.
    hidden = record.to_api(cfg, end + lag, with_usage=False)
    assert "usageTotalUsd" not in hidden and "usageUsd" not in hidden
    # The pricing survives the state file.
    assert RunRecord.from_json(record.to_json()).pricing == record.pricing


async def test_bad_cap_params_are_refused(client: ApifyClient) -> None:
    with pytest.raises(ApifyApiError) as refused:
        client.actor("ultron/leadgen").start(run_input=LEADS, max_total_charge_usd=Decimal(0))
    assert refused.value.status_code == 400
    assert refused.value.type == "max-total-charge-usd-must-be-greater-than-zero"
    async with local(make_config()) as http:
        for params, error_type in (
            ({"maxTotalChargeUsd": "cheap"}, "invalid-input"),
            ({"maxTotalChargeUsd": -1}, "max-total-charge-usd-must-be-greater-than-zero"),
            ({"maxItems": "1.5"}, "invalid-input"),
            ({"maxItems": "many"}, "invalid-input"),
            ({"maxItems": -3}, "max-items-must-be-greater-than-zero"),
        ):
            response = await http.post("/v2/actors/ultron~leadgen/runs", params=params, json={})
            assert response.status_code == 400, params
            body = check(response, "POST", "/v2/actors/{actorId}/runs")
            assert body["error"]["type"] == error_type, params
        assert (await http.get("/v2/actor-runs")).json()["data"]["total"] == 0


async def test_priced_responses_match_the_spec() -> None:
    async with local(make_config()) as http:
        for name in ("leadgen", "similarweb-bulk", "generator-rental"):
            check(await http.get(f"/v2/actors/ultron~{name}"), "GET", "/v2/actors/{actorId}")
        started = await http.post(
            "/v2/actors/ultron~leadgen/runs",
            params={"maxTotalChargeUsd": 0.02, "waitForFinish": 30},
            json={"maxLeads": 10},
        )
        run = check(started, "POST", "/v2/actors/{actorId}/runs")["data"]
        assert run["pricingInfo"]["pricingModel"] == "PAY_PER_EVENT"
        got = await http.get(f"/v2/actor-runs/{run['id']}")
        assert check(got, "GET", "/v2/actor-runs/{runId}")["data"]["status"] == "ABORTED"
        rows = await http.post(
            "/v2/actors/ultron~similarweb-bulk/runs", json={"domains": DOMAINS[:2]}
        )
        check(rows, "POST", "/v2/actors/{actorId}/runs")


async def test_a_charge_limit_below_the_actors_minimum_is_refused(
    client: ApifyClient, server: RunningEmulator
) -> None:
    leadgen = client.actor("ultron/leadgen").get()
    assert leadgen is not None and leadgen.pricing_infos
    info: Any = leadgen.pricing_infos[0]
    assert info.minimal_max_total_charge_usd == 0.02
    before = len(server.emulator.store.runs)
    with pytest.raises(ApifyApiError) as refused:
        client.actor("ultron/leadgen").start(run_input=LEADS, max_total_charge_usd=Decimal("0.019"))
    assert refused.value.status_code == 400
    assert refused.value.type == "max-total-charge-usd-below-minimum"
    assert "0.02" in str(refused.value.message)
    assert len(server.emulator.store.runs) == before  # nothing was started
    # At the minimum the start is accepted; the run carries the same floor in its pricingInfo.
    at_minimum = client.actor("ultron/leadgen").start(
        run_input={**LEADS, "maxLeads": 1}, max_total_charge_usd=Decimal("0.02")
    )
    assert at_minimum.pricing_info is not None
    shown: Any = at_minimum.pricing_info
    assert shown.minimal_max_total_charge_usd == 0.02
    # The floor is a pay-per-event one: a pay-per-result actor takes any limit above 0.
    similarweb = client.actor("ultron/similarweb-bulk").start(
        run_input={"domains": DOMAINS[:1]}, max_total_charge_usd=Decimal("0.000001")
    )
    assert similarweb.options.max_total_charge_usd == 0.000001
    async with local(make_config()) as http:
        response = await http.post(
            "/v2/actors/ultron~leadgen/runs", params={"maxTotalChargeUsd": 0.001}, json={}
        )
        assert response.status_code == 400
        body = check(response, "POST", "/v2/actors/{actorId}/runs")
        assert body["error"]["type"] == "max-total-charge-usd-below-minimum"


def test_a_state_file_from_before_the_minimum_still_loads() -> None:
    stored = LEADGEN_PRICING.to_dict()
    del stored["minimal_max_total_charge_usd"]
    old = Pricing.from_dict(stored)
    assert old.minimal_max_total_charge_usd is None
    assert not old.refuses_max_total_charge(0.000001)
    assert old.to_api()["minimalMaxTotalChargeUsd"] is None
    assert Pricing.from_dict(LEADGEN_PRICING.to_dict()) == LEADGEN_PRICING


def test_the_bundled_registry_prices_the_actors_as_the_emulator_charges() -> None:
    entries = load_registry_file(bundled_registry_text())
    for name, actor in (
        ("ultron-leadgen", "leadgen"),
        ("ultron-similarweb-bulk", "similarweb-bulk"),
        ("ultron-generator", "generator"),
    ):
        emulated = find_actor(f"~{actor}", "ultron")
        assert emulated is not None
        platform = emulated.pricing.to_api()
        registered = ActorEntry.model_validate(entries[name]).pricing
        assert registered is not None
        record = registered.model_dump(by_alias=True, exclude_none=True)
        assert record["pricingModel"] == platform["pricingModel"], name
        for key in ("pricePerUnitUsd", "unitName", "minimalMaxTotalChargeUsd"):
            assert record.get(key) == platform.get(key), (name, key)
        events = platform.get("pricingPerEvent", {}).get("actorChargeEvents", {})
        registered_events = record.get("pricingPerEvent", {}).get("actorChargeEvents", {})
        assert {e: v["eventPriceUsd"] for e, v in registered_events.items()} == {
            e: v["eventPriceUsd"] for e, v in events.items()
        }, name
