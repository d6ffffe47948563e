"""Platform details beyond the happy path: dataset filters, caps, rate limits, faults, state."""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench.stack import free_ports

from apify_emulator import EmulatorConfig
from apify_emulator.webhooks import parse_webhooks_param, render_template
from tests.support.waiting import eventually_async

from .conftest import (
    AUTH,
    TOKEN,
    RunningEmulator,
    WebhookReceiver,
    local,
    make_config,
)


@pytest.fixture
async def http(server: RunningEmulator) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as client:
        yield client


async def start(http: httpx.AsyncClient, actor: str, body: dict[str, Any], **params: Any) -> Any:
    response = await http.post(f"/v2/actors/{actor}/runs", params=params, json=body)
    assert response.status_code == 201, response.text
    return response.json()["data"]


async def test_dataset_filters_apply_after_offset_and_limit(http: httpx.AsyncClient) -> None:
    run = await start(
        http,
        "ultron~generator",
        {"items": 20, "emptyEvery": 5, "hiddenFields": True, "itemBytes": 100},
        waitForFinish=30,
    )
    assert run["status"] == "SUCCEEDED"
    url = f"/v2/datasets/{run['defaultDatasetId']}/items"
    page = await http.get(url, params={"offset": 0, "limit": 10, "clean": "true"})
    items = page.json()
    assert page.headers["x-apify-pagination-count"] == "10"  # scanned window, not returned
    assert [i["index"] for i in items] == [0, 1, 2, 3, 5, 6, 7, 8]
    assert all("#debug" not in i for i in items)

    raw = (await http.get(url, params={"offset": 4, "limit": 1})).json()
    assert raw == [{}]
    hidden = (await http.get(url, params={"limit": 2, "skipHidden": 1})).json()
    assert "#debug" not in hidden[0] and "payload" in hidden[0]
    picked = (await http.get(url, params={"limit": 2, "fields": "value,index"})).json()
    assert list(picked[0]) == ["value", "index"]
    omitted = (await http.get(url, params={"limit": 1, "omit": "payload,#debug"})).json()
    assert set(omitted[0]) == {"index", "id", "value"}

    desc = await http.get(url, params={"desc": 1, "limit": 3, "offset": 1})
    assert [i["index"] for i in desc.json()] == [18, 17, 16]
    assert desc.headers["x-apify-pagination-desc"] == "true"

    everything = await http.get(url)
    assert everything.headers["x-apify-pagination-limit"] == "999999999999"
    assert everything.headers["x-apify-pagination-total"] == "20"
    assert len(everything.json()) == 20

    jsonl = await http.get(url, params={"format": "jsonl", "limit": 3, "skipEmpty": 1})
    assert [json.loads(line)["index"] for line in jsonl.text.splitlines()] == [0, 1, 2]
    head = await http.head(url, params={"limit": 3})
    assert head.status_code == 200 and head.content == b""
    assert head.headers["x-apify-pagination-count"] == "3"
    bad = await http.get(url, params={"format": "xlsx"})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid-input"


async def test_huge_dataset_is_generated_on_read(http: httpx.AsyncClient) -> None:
    run = await start(
        http,
        "ultron~generator",
        {"items": 5_000_000, "durationSecs": 0, "itemBytes": 80},
        waitForFinish=30,
    )
    dataset = (await http.get(f"/v2/datasets/{run['defaultDatasetId']}")).json()["data"]
    assert dataset["itemCount"] == 5_000_000
    tail = await http.get(
        f"/v2/actor-runs/{run['id']}/dataset/items", params={"offset": 4_999_998, "limit": 10}
    )
    assert [i["index"] for i in tail.json()] == [4_999_998, 4_999_999]
    assert tail.headers["x-apify-pagination-count"] == "2"


async def test_item_count_lags_after_success(http: httpx.AsyncClient) -> None:
    run = await start(
        http,
        "ultron~generator",
        {"items": 50, "durationSecs": 0, "itemCountLagSecs": 10},
        waitForFinish=30,
    )
    url = f"/v2/datasets/{run['defaultDatasetId']}"
    assert (await http.get(url)).json()["data"]["itemCount"] < 50
    items = await http.get(url + "/items", params={"limit": 100})
    assert len(items.json()) == 50  # rows are readable, only the counter lags

    async def counted() -> bool:
        return bool((await http.get(url)).json()["data"]["itemCount"] == 50)

    await eventually_async(counted, timeout=5)


async def test_caps_and_limits_endpoint() -> None:
    cfg = make_config(max_concurrent_runs=2, max_total_memory_mbytes=4096)
    async with local(cfg) as http:
        await start(http, "ultron~generator", {"hang": True}, memory=2048)
        too_big = await http.post(
            "/v2/actors/ultron~generator/runs", params={"memory": 4096}, json={}
        )
        assert too_big.status_code == 402
        assert too_big.json()["error"]["type"] == "actor-memory-limit-exceeded"
        await start(http, "ultron~generator", {"hang": True}, memory=1024)
        third = await http.post("/v2/actors/ultron~generator/runs", params={"memory": 128}, json={})
        assert third.status_code == 402
        assert third.json()["error"]["type"] == "concurrent-runs-limit-exceeded"
        limits = (await http.get("/v2/users/me/limits")).json()["data"]
        assert limits["limits"]["maxConcurrentActorJobs"] == 2
        assert limits["limits"]["maxActorMemoryGbytes"] == 4
        assert limits["current"]["activeActorJobCount"] == 2
        assert limits["current"]["actorMemoryGbytes"] == 3


async def test_bad_params_are_400() -> None:
    async with local(make_config()) as http:
        for params in (
            {"memory": 100},
            {"memory": 65536},
            {"timeout": "soon"},
            {"waitForFinish": -1},
            {"webhooks": "not-base64!"},
            {"maxItems": 0},
        ):
            response = await http.post("/v2/actors/ultron~leadgen/runs", params=params, json={})
            assert response.status_code == 400, params
        bad_hook = base64.b64encode(b'[{"eventTypes": ["NOPE"], "requestUrl": "http://x"}]')
        response = await http.post(
            "/v2/actors/ultron~leadgen/runs", params={"webhooks": bad_hook.decode()}, json={}
        )
        assert response.status_code == 400
        assert (await http.get("/v2/actor-runs", params={"desc": "maybe"})).status_code == 400
        wrong_token = await http.get("/v2/actor-runs", headers={"Authorization": "Bearer nope"})
        assert wrong_token.status_code == 401
        by_query = await http.get(
            "/v2/actor-runs", params={"token": TOKEN}, headers={"Authorization": ""}
        )
        assert by_query.status_code == 200
        nowhere = await http.get("/v2/nothing-here")
        assert nowhere.status_code == 404 and nowhere.json()["error"]["type"] == "page-not-found"
        wrong_method = await http.delete("/v2/actor-runs")
        assert wrong_method.status_code == 405
        assert wrong_method.json()["error"]["type"] == "method-not-allowed"


async def test_gzip_and_unknown_encodings() -> None:
    async with local(make_config()) as http:
        body = gzip.compress(json.dumps({"brief": "gz", "maxLeads": 1}).encode())
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        response = await http.post(
            "/v2/acts/ultron~leadgen/runs",
            content=body,
            headers=headers,
            params={"waitForFinish": 10},
        )
        assert response.status_code == 201
        items = await http.get(f"/v2/datasets/{response.json()['data']['defaultDatasetId']}/items")
        assert items.json()[0]["brief"] == "gz"
        brotli = await http.post(
            "/v2/acts/ultron~leadgen/runs", content=b"x", headers={"Content-Encoding": "br"}
        )
        assert brotli.status_code == 415


async def test_rate_limit_429_with_header() -> None:
    async with local(make_config(rate_limit_rps=3)) as http:
        run = await start(http, "ultron~generator", {"items": 1})
        statuses = [(await http.get(f"/v2/actor-runs/{run['id']}")) for _ in range(6)]
        limited = [r for r in statuses if r.status_code == 429]
        assert limited and limited[0].headers["x-ratelimit-limit"] == "3"
        assert limited[0].json()["error"]["type"] == "rate-limit-exceeded"
        assert statuses[0].headers["x-ratelimit-limit"] == "3"


async def test_http_faults_and_stats(server: RunningEmulator, http: httpx.AsyncClient) -> None:
    fault = server.control(
        "POST",
        "/faults/http",
        {"method": "GET", "path": "/v2/actor-runs", "status": 503, "count": 2},
    )["data"]
    assert server.control("GET", "/faults")["data"]["http"][0]["id"] == fault["id"]
    server.control("POST", "/stats/reset")
    codes = [(await http.get("/v2/actor-runs")).status_code for _ in range(3)]
    assert codes == [503, 503, 200]
    stats = server.control("GET", "/stats")["data"]
    assert stats["routes"]["GET /v2/actor-runs"] == 3
    assert stats["statuses"]["503"] == 2

    server.control(
        "POST", "/faults/http", {"path": "/v2/users/*", "status": None, "delayMs": 1, "count": None}
    )
    assert (await http.get("/v2/users/me/limits")).status_code == 200
    server.control("DELETE", "/faults")
    assert server.control("GET", "/faults")["data"]["http"] == []


async def test_lost_start_error_mode(server: RunningEmulator, http: httpx.AsyncClient) -> None:
    before = (await http.get("/v2/actor-runs")).json()["data"]["total"]
    server.control("POST", "/faults/lost-start", {"count": 1, "mode": "error"})
    lost = await http.post("/v2/actors/ultron~generator/runs", json={"items": 1})
    assert lost.status_code == 500
    assert (await http.get("/v2/actor-runs")).json()["data"]["total"] == before + 1


async def test_webhook_faults_drop_and_duplicate(
    server: RunningEmulator, http: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    def hooks(path: str) -> str:
        spec = [
            {
                "eventTypes": ["ACTOR.RUN.SUCCEEDED", "ACTOR.RUN.CREATED"],
                "requestUrl": f"{receiver.url}{path}",
            }
        ]
        return base64.b64encode(json.dumps(spec).encode()).decode()

    server.control(
        "POST",
        "/faults/webhooks",
        {"action": "drop", "count": 1, "eventTypes": ["ACTOR.RUN.SUCCEEDED"]},
    )
    dropped = await start(
        http, "ultron~generator", {"items": 1}, webhooks=hooks("/f/drop"), waitForFinish=30
    )
    server.control(
        "POST",
        "/faults/webhooks",
        {"action": "duplicate", "count": 1, "eventTypes": ["ACTOR.RUN.SUCCEEDED"]},
    )
    duplicated = await start(
        http, "ultron~generator", {"items": 1}, webhooks=hooks("/f/dup"), waitForFinish=30
    )
    assert dropped["status"] == duplicated["status"] == "SUCCEEDED"
    dups = await eventually_async(
        lambda: (
            [r for r in receiver.for_path("/f/dup") if r.body["eventType"] == "ACTOR.RUN.SUCCEEDED"]
            if len(receiver.for_path("/f/dup")) >= 3
            else None
        )
    )
    assert len({d.headers["x-apify-webhook-dispatch-id"] for d in dups}) == 1 and len(dups) == 2
    drops = receiver.for_path("/f/drop")
    assert [d.body["eventType"] for d in drops] == ["ACTOR.RUN.CREATED"]
    assert drops[0].body["resource"]["status"] == "READY"


async def test_timed_out_webhook_and_log(
    http: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    spec = [
        {
            "eventTypes": ["ACTOR.RUN.TIMED_OUT"],
            "requestUrl": f"{receiver.url}/f/timeout",
            "doNotRetry": True,
        }
    ]
    run = await start(
        http,
        "ultron~generator",
        {"durationSecs": 100, "items": 10},
        timeout=2,
        webhooks=base64.b64encode(json.dumps(spec).encode()).decode(),
    )
    got = (await eventually_async(lambda: receiver.for_path("/f/timeout")))[0]
    assert got.body["resource"]["status"] == "TIMED-OUT"
    assert got.body["eventType"] == "ACTOR.RUN.TIMED_OUT"
    log = await http.get(f"/v2/actor-runs/{run['id']}/log")
    assert "TIMING-OUT" in log.text and "TIMED-OUT" in log.text
    assert log.headers["content-type"].startswith("text/plain")


async def test_state_file_survives_restart(tmp_path: Path) -> None:
    cfg = make_config(state_file=str(tmp_path / "state.sqlite"))
    async with local(cfg) as http:
        run = await start(http, "ultron~leadgen", {"brief": "persist", "maxLeads": 4})
    async with local(cfg) as http:
        again = await http.get(f"/v2/actor-runs/{run['id']}", params={"waitForFinish": 10})
        assert again.json()["data"]["status"] == "SUCCEEDED"
        assert again.json()["data"]["startedAt"] == run["startedAt"]
        items = await http.get(f"/v2/datasets/{run['defaultDatasetId']}/items")
        assert [i["brief"] for i in items.json()] == ["persist"] * 4
        reset = await http.post("/_emulator/reset", json={})
        assert reset.status_code == 200
        assert (await http.get(f"/v2/actor-runs/{run['id']}")).status_code == 404


def test_config_from_env_and_templates() -> None:
    cfg = EmulatorConfig.from_env(
        {
            "APIFY_EMULATOR_TIME_SCALE": "0.1",
            "APIFY_EMULATOR_TOKENS": "a, b",
            "APIFY_EMULATOR_PORT": "9999",
            "APIFY_EMULATOR_STATE_FILE": "/tmp/x.db",
        },
        host="0.0.0.0",
    )
    assert (cfg.time_scale, cfg.tokens, cfg.port, cfg.host) == (0.1, ("a", "b"), 9999, "0.0.0.0")
    assert cfg.token_ok("a") and not cfg.token_ok("c")

    context = {"resource": {"id": "R1", "n": 3}, "eventType": "E"}
    assert render_template('{"id": {{resource.id}}, "n": {{resource.n}}}', context, False) == {
        "id": "R1",
        "n": 3,
    }
    assert render_template('{"s": "{{resource.id}}"}', context, False) == {"s": "{{resource.id}}"}
    assert render_template('{"s": "{{resource}}", "t": "x {{resource.n}} y"}', context, True) == {
        "s": {"id": "R1", "n": 3},
        "t": "x 3 y",
    }
    raw = base64.b64encode(
        json.dumps(
            [
                {
                    "eventTypes": ["ACTOR.RUN.TIMED_OUT"],
                    "requestUrl": "http://127.0.0.1:9/h",
                    "payloadTemplate": '{"a": {{userId}}}',
                }
            ]
        ).encode()
    ).decode()
    assert parse_webhooks_param(raw)[0]["eventTypes"] == ["ACTOR.RUN.TIMED_OUT"]
    unknown = base64.b64encode(
        json.dumps(
            [
                {
                    "eventTypes": ["ACTOR.RUN.FAILED"],
                    "requestUrl": "http://h/",
                    "payloadTemplate": '{"a": {{secret}}}',
                }
            ]
        ).encode()
    ).decode()
    with pytest.raises(Exception, match="unknown variable"):
        parse_webhooks_param(unknown)


async def test_cli_serves_health() -> None:
    (port,) = free_ports(1)
    env = {**os.environ, "APIFY_EMULATOR_TIME_SCALE": "0.1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "apify_emulator", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:

            async def healthy() -> bool:
                if proc.poll() is not None:
                    raise RuntimeError(f"the emulator exited with {proc.returncode}")
                try:
                    return bool((await http.get("/_emulator/health")).json() == {"ok": True})
                except httpx.TransportError:
                    return False

            await eventually_async(healthy, timeout=15)
            config = (await http.get("/_emulator/config")).json()["data"]
            assert config["time_scale"] == 0.1
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
    assert f"listening on http://127.0.0.1:{port}" in stderr


async def test_lost_start_hang_mode(server: RunningEmulator) -> None:
    server.control("POST", "/faults/lost-start", {"count": 1, "mode": "hang"})
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=0.5) as http:
        before = (await http.get("/v2/actor-runs")).json()["data"]["total"]
        with pytest.raises(httpx.ReadTimeout):
            await http.post("/v2/actors/ultron~generator/runs", json={"items": 1})
        assert (await http.get("/v2/actor-runs")).json()["data"]["total"] == before + 1
        # Only the next start was affected.
        assert (await http.post("/v2/actors/ultron~generator/runs", json={})).status_code == 201


async def test_caps_that_are_off_report_large_limits_never_zero() -> None:
    """A faithful platform never says 0; a client admitting runs by these figures would read
    0 as "nothing may run"."""
    cfg = make_config(max_concurrent_runs=0, max_total_memory_mbytes=0)
    async with local(cfg) as http:
        limits = (await http.get("/v2/users/me/limits")).json()["data"]["limits"]
        assert limits["maxConcurrentActorJobs"] >= 10_000
        assert limits["maxActorMemoryGbytes"] >= 10_000
