"""The metrics an operator scrapes, over real HTTP from the running stack: the API's
``/metrics`` (admin key), the worker's, and the Temporal SDK's; a request moves them."""

from __future__ import annotations

import secrets
from collections import defaultdict

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.cli.devstack import DevStack
from tests.support.receiver import callback_receiver
from tests.support.waiting import eventually

from .conftest import E2E_EMULATOR_TIME_SCALE, E2E_ENV, free_stack_ports
from .support import api_client, settled_run, submit, wait_terminal

pytestmark = pytest.mark.e2e


class Scrape:
    """One scrape: every sample by name and labels, and the names of the families."""

    def __init__(self, text: str) -> None:
        self.families: set[str] = set()
        self.samples: dict[str, dict[frozenset[tuple[str, str]], float]] = defaultdict(dict)
        for family in text_string_to_metric_families(text):
            self.families.add(family.name)
            for sample in family.samples:
                self.samples[sample.name][frozenset(sample.labels.items())] = sample.value

    def value(self, name: str, **labels: str) -> float:
        return self.samples.get(name, {}).get(frozenset(labels.items()), 0.0)


def scrape(url: str, headers: dict[str, str] | None = None) -> Scrape:
    response = httpx.get(url, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return Scrape(response.text)


def test_a_request_moves_the_figures_on_every_metrics_endpoint(stack: DevStack) -> None:
    api_metrics = stack.urls["api"] + "/metrics"
    worker_metrics = stack.urls["worker_metrics"]
    assert httpx.get(api_metrics, timeout=30).status_code == 401  # the public port: a key
    api_before = scrape(api_metrics, stack.api_headers)
    worker_before = scrape(worker_metrics)
    assert "orchestrator_platform_calls" in worker_before.families

    items = 12
    with callback_receiver() as receiver, api_client(stack) as api:
        run_id = submit(
            api,
            {
                "workspaceId": f"ws_e2e_metrics_{secrets.token_hex(3)}",
                "callbackWebhook": receiver.url,
                "runs": [
                    {"actor": "ultron-leadgen", "input": {"brief": {"targetCount": items}}},
                    {"actor": "ultron-generator", "input": {"items": 5, "durationSecs": 1}},
                ],
            },
        )
        assert wait_terminal(api, run_id)["state"] == "succeeded"
        run = settled_run(api, run_id)
        eventually(lambda: receiver.received, timeout=60, description="the callback")
    rows = {child["actor"]: child["itemsIngested"] for child in run["children"]}
    assert rows["ultron-leadgen"] >= 1 and rows["ultron-generator"] == 5
    spend = {child["actor"]: child["usageTotalUsd"] for child in run["children"]}

    def moved() -> tuple[Scrape, Scrape] | None:
        api_after = scrape(api_metrics, stack.api_headers)
        worker_after = scrape(worker_metrics)
        done = api_after.value("orchestrator_requests", state="succeeded") > api_before.value(
            "orchestrator_requests", state="succeeded"
        ) and worker_after.value(
            "orchestrator_callback_attempts_total", outcome="delivered"
        ) > worker_before.value("orchestrator_callback_attempts_total", outcome="delivered")
        return (api_after, worker_after) if done else None

    # The database gauges are refreshed every few seconds; the counters move at once.
    found = eventually(moved, timeout=30, description="the metrics to move")
    assert found is not None
    api_after, worker_after = found

    def delta(name: str, **labels: str) -> float:
        return worker_after.value(name, **labels) - worker_before.value(name, **labels)

    assert api_after.value("orchestrator_children", state="succeeded") >= (
        api_before.value("orchestrator_children", state="succeeded") + 2
    )
    assert api_after.value("orchestrator_db_collector_up") == 1
    for actor, count in rows.items():
        assert delta("orchestrator_rows_ingested_total", actor=actor) >= count, actor
    assert delta("orchestrator_completion_to_rows_seconds_count") >= 2
    assert delta("orchestrator_callback_attempts_total", outcome="delivered") >= 1
    # Two starts, their status reads and dataset pages, every one answered.
    assert delta("orchestrator_platform_calls_total", kind="start", status="ok") >= 2
    assert delta("orchestrator_platform_calls_total", kind="status", status="ok") >= 2
    assert delta("orchestrator_platform_calls_total", kind="datasetPage", status="ok") >= 2
    for actor, usd in spend.items():
        if usd:
            assert delta("orchestrator_spend_usd_total", actor=actor) >= usd * 0.999, actor
    assert sum(spend.values()) > 0

    # Temporal's own SDK metrics, from the worker's core on its own port.
    sdk = scrape(stack.urls["temporal_metrics"])
    assert any(name.startswith("temporal_") for name in sdk.families), sorted(sdk.families)[:20]
    assert any(name.startswith("temporal_workflow_completed") for name in sdk.samples), sorted(
        sdk.samples
    )[:40]


def test_with_tracing_on_every_process_exports_its_spans_over_otlp(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # A stand-in OTLP/HTTP collector: it records each export's body (protobuf, where the
    # service and span names appear as plain strings).
    with callback_receiver(path="") as collector:
        env = E2E_ENV | {
            "ORCHESTRATOR_TRACING_ENABLED": "true",
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
        with (
            DevStack(
                tmp_path_factory.mktemp("traced-stack"),
                free_stack_ports(),
                extra_env=env,
                emulator_time_scale=E2E_EMULATOR_TIME_SCALE,
                temporal_ui=False,
            ) as traced,
            api_client(traced) as api,
        ):
            run_id = submit(
                api,
                {
                    "workspaceId": "ws_e2e_traced",
                    "runs": [{"actor": "ultron-generator", "input": {"items": 3}}],
                },
            )
            assert wait_terminal(api, run_id)["state"] == "succeeded"

            def exported() -> bytes | None:
                body = b"".join(r.body for r in collector.received if r.path == "/v1/traces")
                wanted = (
                    b"orchestrator-api",
                    b"orchestrator-worker",
                    b"RunActivity:look_and_finish",  # the poller ingests in it
                )
                return body if all(w in body for w in wanted) else None

            body = eventually(exported, timeout=30, description="spans from API and worker")
            assert body is not None and b"StartWorkflow:ScraperOrchestrator" in body
