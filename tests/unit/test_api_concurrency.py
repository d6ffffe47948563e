"""``/workspaces/{id}/concurrency`` and ``orchestrator workspaces concurrency``: operators'
per-workspace limits for capacity admission."""

from __future__ import annotations

from typing import Any

from orchestrator.db.queries.admission import workspace_concurrency_limits
from orchestrator.domain.ids import admission_workflow_id
from orchestrator.workflows.admission_types import REFRESH_SIGNAL
from tests.unit.api_harness import Api
from tests.unit.test_cli_catalog import api, run_cli  # noqa: F401  (fixtures)


async def test_set_read_and_clear_a_limit_and_admission_is_told(api: Api) -> None:  # noqa: F811
    admin = api.auth(api.admin_key)
    path = "/workspaces/ws_conc/concurrency"
    assert (await api.client.get(path, headers=admin)).json()["maxConcurrentRuns"] is None
    put = await api.client.put(path, json={"maxConcurrentRuns": 3}, headers=admin)
    assert put.status_code == 200 and put.json() == {
        "workspaceId": "ws_conc",
        "maxConcurrentRuns": 3,
    }
    with api.engine.connect() as conn:
        assert workspace_concurrency_limits(conn)["ws_conc"] == 3
    refresh = (admission_workflow_id(api.settings.task_queue), REFRESH_SIGNAL)
    assert api.temporal.signalled.count(refresh) == 1
    key, _ = api.workspace_key("ws_conc")
    mine = await api.client.get(path, headers=api.auth(key))
    assert mine.json()["maxConcurrentRuns"] == 3
    cleared = await api.client.delete(path, headers=admin)
    assert cleared.json()["maxConcurrentRuns"] is None
    assert api.temporal.signalled.count(refresh) == 2
    with api.engine.connect() as conn:
        assert "ws_conc" not in workspace_concurrency_limits(conn)


async def test_only_admins_set_limits_and_bad_values_are_refused(api: Api) -> None:  # noqa: F811
    path = "/workspaces/ws_conc2/concurrency"
    key, _ = api.workspace_key("ws_conc2")
    own = await api.client.put(path, json={"maxConcurrentRuns": 3}, headers=api.auth(key))
    assert own.status_code == 403
    other, _ = api.workspace_key("ws_other")
    hidden = await api.client.get(path, headers=api.auth(other))
    assert hidden.status_code == 404
    admin = api.auth(api.admin_key)
    for bad in (-1, "x", 10**6, False, 2.5):
        answer = await api.client.put(path, json={"maxConcurrentRuns": bad}, headers=admin)
        assert answer.status_code == 422, answer.text
        assert answer.headers["content-type"].startswith("application/problem+json")
    with api.engine.connect() as conn:
        assert "ws_conc2" not in workspace_concurrency_limits(conn)
    integral = await api.client.put(path, json={"maxConcurrentRuns": 2.0}, headers=admin)
    assert integral.status_code == 200 and integral.json()["maxConcurrentRuns"] == 2


def test_the_cli_sets_shows_and_clears_through_the_api(run_cli: Any) -> None:  # noqa: F811
    shown = run_cli("workspaces", "concurrency", "ws_cli")
    assert shown.exit_code == 0 and "no concurrency limit" in shown.output
    set_ = run_cli("workspaces", "concurrency", "ws_cli", "--max-runs", "2")
    assert set_.exit_code == 0 and "at most 2 platform run(s)" in set_.output, set_.output
    assert "at most 2" in run_cli("workspaces", "concurrency", "ws_cli").output
    cleared = run_cli("workspaces", "concurrency", "ws_cli", "--clear")
    assert cleared.exit_code == 0 and "no concurrency limit" in cleared.output
    both = run_cli("workspaces", "concurrency", "ws_cli", "--clear", "--max-runs", "1")
    assert both.exit_code == 2
