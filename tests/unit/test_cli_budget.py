"""``orchestrator workspaces budget``: an operator shows, sets and removes a workspace's
spending limit from the command line, on the database the settings name; and the
``submit --watch`` table, which shows cost, budget and why a request stopped."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from orchestrator.cli.main import _table, app
from orchestrator.db.engine import build_engine
from orchestrator.db.queries.budgets import get_workspace_limit
from orchestrator.domain.spending import BudgetPeriod, WorkspaceLimit


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("ORCHESTRATOR_DATABASE_URL", url)
    return url


def budget(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["workspaces", "budget", "ws_cli", *args])
    return result.exit_code, " ".join(result.output.split())


def stored(url: str) -> WorkspaceLimit | None:
    engine = build_engine(url)
    try:
        with engine.connect() as conn:
            return get_workspace_limit(conn, "ws_cli")
    finally:
        engine.dispose()


def test_set_show_and_clear_a_limit(database: str) -> None:
    assert budget() == (0, "ws_cli has no spending limit")
    code, out = budget("--limit-usd", "25", "--period", "day")
    assert code == 0, out
    assert out.startswith("workspace ws_cli's daily budget of $25.00: $0.000000 spent since")
    assert "$25.000000 left (available)" in out
    assert stored(database) == WorkspaceLimit("ws_cli", 25.0, BudgetPeriod.DAY)
    assert budget()[1] == out
    assert budget("--clear") == (0, "ws_cli has no spending limit")
    assert stored(database) is None


def test_bad_values_are_refused_and_change_nothing(database: str) -> None:
    code, out = budget("--limit-usd", "0")
    assert code == 2 and "limitUsd must be greater than 0" in out
    code, out = budget("--limit-usd", "5", "--period", "week")
    assert code == 2 and "--period must be month or day" in out
    assert stored(database) is None


def test_the_watch_table_shows_cost_budget_and_why_a_request_stopped() -> None:
    child = {
        "index": 0,
        "actor": "ultron-similarweb-bulk",
        "state": "aborted",
        "platformStatus": "ABORTED",
        "itemsIngested": 27,
        "usageTotalUsd": 0.054,
        "usageSettled": False,
        "statusMessage": "stopped: the request's budget is spent",
    }
    run = {
        "id": "run_x",
        "state": "aborted",
        "usageTotalUsd": 0.054,
        "usageSettled": False,
        "budgetUsd": 0.05,
        "stopMessage": "stopped: the request's budget of $0.050000 is spent",
        "children": [child],
    }
    console = Console(record=True, width=200)
    console.print(_table(run))
    text = " ".join(console.export_text().split())
    assert "run_x — aborted" in text
    assert "~$0.0540" in text and "27" in text and "ABORTED" in text
    assert "total cost ~$0.0540 of a $0.0500 budget — stopped: the request's budget" in text
