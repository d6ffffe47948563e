"""The ``submit --watch`` table of a planned request (issue 12, point 6): the chain is
visible - each step's need, where a chained step's input comes from and how many values it
got, a skipped step as such - and the plan's estimate stands next to the spend."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from orchestrator.cli.main import _table


def child(index: int, actor: str, state: str, **extra: Any) -> dict[str, Any]:
    return {
        "index": index,
        "actor": actor,
        "state": state,
        "platformStatus": None,
        "itemsIngested": 0,
        "usageTotalUsd": None,
        "usageSettled": False,
        "statusMessage": None,
        "inputFrom": None,
        "inputBuilt": None,
        **extra,
    }


def planned_run(traffic: dict[str, Any]) -> dict[str, Any]:
    leads = child(
        0, "ultron-leadgen", "succeeded", platformStatus="SUCCEEDED", itemsIngested=25,
        usageTotalUsd=0.25005, usageSettled=True,
    )  # fmt: skip
    return {
        "id": "run_b",
        "state": "succeeded",
        "usageTotalUsd": 0.30005,
        "usageSettled": True,
        "budgetUsd": 1.0,
        "stopMessage": None,
        "plan": {
            "needs": ["leads", "web-traffic"],
            "estimatedCostUsd": 0.30005,
            "steps": [{"index": 0, "need": "leads"}, {"index": 1, "need": "web-traffic"}],
        },
        "children": [leads, traffic],
    }


def rendered(run: dict[str, Any]) -> str:
    console = Console(record=True, width=250)
    console.print(_table(run))
    # The cells' words in reading order, without the box-drawing borders.
    return " ".join(console.export_text().replace("│", " ").replace("┃", " ").split())


SOURCE = {"domains": {"run": 0, "field": "domain", "distinct": True, "max": 500}}


def test_the_watch_table_shows_the_chain_and_the_plans_estimate() -> None:
    traffic = child(
        1, "ultron-similarweb-bulk", "succeeded", platformStatus="SUCCEEDED", itemsIngested=23,
        inputFrom=SOURCE, inputBuilt={"domains": 23}, usageTotalUsd=0.046, usageSettled=True,
    )  # fmt: skip
    text = rendered(planned_run(traffic))
    assert "run_b — succeeded — planned for leads, web-traffic" in text
    assert "leads ultron-leadgen" in text
    assert "web-traffic ultron-similarweb-bulk domains ← #0.domain (23) succeeded" in text
    assert "total cost $0.3000 (plan estimate $0.3000) of a $1.0000 budget" in text


def test_a_waiting_and_a_skipped_step_read_as_such() -> None:
    waiting = child(1, "ultron-similarweb-bulk", "pending", inputFrom=SOURCE)
    assert "domains ← #0.domain pending" in rendered(planned_run(waiting))
    skipped = child(
        1, "ultron-similarweb-bulk", "skipped", inputFrom=SOURCE,
        statusMessage="skipped: run 0 (ultron-leadgen) produced no `domain` values",
    )  # fmt: skip
    text = rendered(planned_run(skipped))
    assert "domains ← #0.domain skipped" in text and "produced no `domain` values" in text


def test_a_hand_written_request_has_no_plan_columns_filled() -> None:
    run = planned_run(child(1, "ultron-similarweb-bulk", "running"))
    del run["plan"]
    text = rendered(run)
    assert "planned for" not in text and "plan estimate" not in text
    assert "1 ultron-similarweb-bulk running" in text
