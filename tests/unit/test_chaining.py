"""Chained runs (issue 12, point 3): the pure rules (sources, values from rows), the
roll-up of ``skipped``, and submission through the API (422s naming the member, the
sources stored and shown, the fingerprint)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine

from orchestrator.db.queries import runs as run_queries
from orchestrator.domain.chaining import (
    InvalidInputFrom,
    StepSource,
    ValueCollector,
    build_values,
    check_input_from,
    dependencies,
    field_values,
    pointer_token,
    skip_message,
)
from orchestrator.domain.lifecycle import ChildState, RunState, roll_up
from orchestrator.service.commands import ActorRun, SubmitRequest
from orchestrator.service.submission import request_hash
from tests.unit.api_harness import api_for

C = ChildState
LEADS: dict[str, Any] = {"actor": "ultron-leadgen", "input": {"brief": {"product": "x"}}}


def traffic(**source: Any) -> dict[str, Any]:
    return {
        "actor": "ultron-similarweb-bulk",
        "inputFrom": {"domains": {"run": 0, "field": "domain", **source}},
    }


# --- sources -------------------------------------------------------------------------------


def test_a_valid_source_gets_the_settings_cap_unless_it_has_its_own() -> None:
    sources = {"domains": StepSource(run=0, field="domain"), "n": StepSource(1, "a.b", max=3)}
    resolved = check_input_from(2, {"other": 1}, sources, runs=3, hard_max=50)
    assert resolved == {
        "domains": StepSource(run=0, field="domain", distinct=True, max=50),
        "n": StepSource(run=1, field="a.b", distinct=True, max=3),
    }


@pytest.mark.parametrize(
    ("name", "source", "run_input", "pointer", "words"),
    [
        ("domains", StepSource(1, "domain"), {}, "/runs/1/inputFrom/domains/run", "itself"),
        ("domains", StepSource(2, "domain"), {}, "/runs/1/inputFrom/domains/run", "later run"),
        ("domains", StepSource(7, "domain"), {}, "/runs/1/inputFrom/domains/run", "not a run"),
        ("domains", StepSource(0, "a..b"), {}, "/runs/1/inputFrom/domains/field", "dotted"),
        ("domains", StepSource(0, "d", max=51), {}, "/runs/1/inputFrom/domains/max", "50"),
        ("domains", StepSource(0, "d", max=0), {}, "/runs/1/inputFrom/domains/max", "between"),
        ("domains", StepSource(0, "d"), {"domains": []}, "/runs/1/inputFrom/domains", "both"),
        ("a/b~c", StepSource(5, "d"), {}, "/runs/1/inputFrom/a~1b~0c/run", "not a run"),
    ],
)
def test_bad_sources_name_their_member(
    name: str, source: StepSource, run_input: dict[str, Any], pointer: str, words: str
) -> None:
    with pytest.raises(InvalidInputFrom, match=words) as raised:
        check_input_from(1, run_input, {name: source}, runs=3, hard_max=50)
    assert raised.value.field == pointer
    assert raised.value.code == "validation-failed"


def test_pointer_tokens_are_escaped() -> None:
    assert pointer_token("a/b~c") == "a~1b~0c"


def test_the_graph_lists_each_chained_run_and_its_sources() -> None:
    chained = {"x": StepSource(0, "a"), "y": StepSource(1, "b"), "z": StepSource(0, "c")}
    assert dependencies([None, None, chained, {}]) == {2: [0, 1]}


def test_sources_round_trip_through_their_stored_form() -> None:
    source = StepSource(run=2, field="company.domain", distinct=False, max=9)
    assert StepSource.from_stored(source.stored()) == source
    assert StepSource.from_stored({"run": 0, "field": "d"}) == StepSource(0, "d")


# --- values from rows ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "path", "values"),
    [
        ({"domain": "a.com"}, "domain", ["a.com"]),
        ({"domain": None}, "domain", []),
        ({"other": 1}, "domain", []),
        ({"company": {"domain": "b.com"}}, "company.domain", ["b.com"]),
        ({"company": "acme"}, "company.domain", []),
        ({"company": None}, "company.domain", []),
        ({"tags": ["x", None, "y"]}, "tags", ["x", "y"]),
        ({"n": 0}, "n", [0]),
        ({"ok": False}, "ok", [False]),
        ("not an object", "domain", []),
        ([{"domain": "a"}], "domain", []),
    ],
)
def test_field_values(row: Any, path: str, values: list[Any]) -> None:
    assert field_values(row, path) == values


def test_values_are_deduplicated_in_first_occurrence_order_and_capped() -> None:
    rows = [{"d": v} for v in ["b", "a", "b", None, "c", "a", "d", "e"]] + [{}]
    assert build_values(StepSource(0, "d", max=10), rows) == ["b", "a", "c", "d", "e"]
    assert build_values(StepSource(0, "d", max=3), rows) == ["b", "a", "c"]
    assert build_values(StepSource(0, "d", distinct=False, max=4), rows) == ["b", "a", "b", "c"]


def test_structured_values_are_deduplicated_by_their_json() -> None:
    rows = [{"v": {"a": 1, "b": 2}}, {"v": {"b": 2, "a": 1}}, {"v": [[1], 1]}, {"v": [[1]]}]
    assert build_values(StepSource(0, "v", max=10), rows) == [{"a": 1, "b": 2}, [1], 1]


def test_a_collector_is_full_at_its_cap_and_an_unresolved_cap_is_an_error() -> None:
    collector = ValueCollector(StepSource(0, "tags", max=2))
    collector.add({"tags": ["a", "b", "c"]})
    assert collector.full and collector.values == ["a", "b"]
    with pytest.raises(ValueError, match="never resolved"):
        _ = ValueCollector(StepSource(0, "d")).full


def test_the_skip_message_says_which_run_and_field() -> None:
    source = StepSource(0, "domain", max=5)
    assert skip_message("domains", source, "ultron-leadgen", "succeeded", 3) == (
        "skipped: run 0 (ultron-leadgen) produced no `domain` values for its input field `domains`"
    )
    failed = skip_message("domains", source, "ultron-leadgen", "failed", 0)
    assert "(it ended failed with 0 row(s))" in failed


# --- roll-up -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("children", "waiting", "expected"),
    [
        # A chained run waiting for its source does not make the request "spawning".
        ([C.RUNNING, C.PENDING], 1, RunState.RUNNING),
        ([C.SUCCEEDED, C.PENDING], 1, RunState.RUNNING),
        ([C.RUNNING, C.PENDING, C.PENDING], 1, RunState.SPAWNING),
        ([C.PENDING, C.PENDING], 1, RunState.QUEUED),
        # Skipped is neither a success nor a failure: the others decide.
        ([C.SUCCEEDED, C.SKIPPED], 0, RunState.SUCCEEDED),
        ([C.FAILED, C.SKIPPED], 0, RunState.FAILED),
        ([C.SUCCEEDED, C.FAILED, C.SKIPPED], 0, RunState.PARTIAL),
        ([C.TIMED_OUT, C.SKIPPED], 0, RunState.TIMED_OUT),
        ([C.ABORTED, C.SKIPPED], 0, RunState.ABORTED),
        ([C.SKIPPED], 0, RunState.SUCCEEDED),
        ([C.RUNNING, C.SKIPPED], 0, RunState.RUNNING),
    ],
)
def test_roll_up_of_chained_runs(
    children: list[ChildState], waiting: int, expected: RunState
) -> None:
    assert roll_up(children, waiting=waiting) is expected


def test_skipped_is_terminal_and_final() -> None:
    assert C.SKIPPED.terminal
    assert roll_up([C.SKIPPED, C.SUCCEEDED], aborted=True) is RunState.ABORTED


# --- submission ----------------------------------------------------------------------------


def test_the_fingerprint_names_input_from_only_when_present() -> None:
    plain = SubmitRequest(runs=(ActorRun(actor="a"),))
    expected_minimal = "b6a317283d68d206db4d93327d987b11c850276fbf4d1aa3dad779d9421392ac"
    assert request_hash(plain, "ws_b") == expected_minimal
    chained = SubmitRequest(
        runs=(ActorRun(actor="a"), ActorRun(actor="b", input_from={"d": StepSource(0, "x")}))
    )
    other = SubmitRequest(
        runs=(ActorRun(actor="a"), ActorRun(actor="b", input_from={"d": StepSource(0, "y")}))
    )
    assert request_hash(chained, "ws_b") != request_hash(other, "ws_b")


@pytest.mark.parametrize(
    ("runs", "pointer"),
    [
        ([LEADS, traffic(run=1)], "/runs/1/inputFrom/domains/run"),
        ([traffic(run=1), LEADS], "/runs/0/inputFrom/domains/run"),
        ([LEADS, traffic(run=5)], "/runs/1/inputFrom/domains/run"),
        ([LEADS, traffic(run=-1)], "/runs/1/inputFrom/domains/run"),
        ([LEADS, traffic(max=1001)], "/runs/1/inputFrom/domains/max"),
        ([LEADS, traffic(field="")], "/runs/1/inputFrom/domains/field"),
        ([LEADS, {**traffic(), "input": {"domains": ["a.com"]}}], "/runs/1/inputFrom/domains"),
        ([LEADS, traffic(unknown=1)], "/runs/1/inputFrom/domains/unknown"),
    ],
)
async def test_bad_sources_are_a_422_naming_the_member_and_nothing_is_created(
    engine: Engine, runs: list[dict[str, Any]], pointer: str
) -> None:
    async with api_for(engine) as api:
        response = await api.client.post(
            "/runs",
            json={"workspaceId": "ws_chain", "runs": runs},
            headers=api.auth(api.admin_key),
        )
        assert response.status_code == 422, response.text
        assert response.headers["content-type"].startswith("application/problem+json")
        body = response.json()
        fields = [body.get("field")] + [e.get("field") for e in body.get("errors", [])]
        assert pointer in fields, body
        assert api.counts() == (0, 0) and api.temporal.started == []


async def test_sources_are_stored_resolved_and_shown(engine: Engine) -> None:
    async with api_for(engine, max_step_input_values=200) as api:
        headers = api.auth(api.admin_key)
        response = await api.client.post(
            "/runs",
            json={"workspaceId": "ws_chain", "runs": [LEADS, traffic(distinct=False)]},
            headers=headers,
        )
        assert response.status_code == 202, response.text
        run_id = response.json()["runId"]
        with api.engine.connect() as conn:
            leads, chained = run_queries.get_children(conn, run_id)
        assert leads.input_from is None
        assert chained.input_from == {
            "domains": {"run": 0, "field": "domain", "distinct": False, "max": 200}
        }
        assert chained.input == {} and chained.waiting
        view = (await api.client.get(f"/runs/{run_id}", headers=headers)).json()
        first, second = view["children"]
        assert first["inputFrom"] is None and first["inputBuilt"] is None
        assert second["inputFrom"] == {
            "domains": {"run": 0, "field": "domain", "distinct": False, "max": 200}
        }
        assert second["inputBuilt"] is None
        assert view["counts"]["skipped"] == 0


async def test_the_document_states_the_cap_of_a_source(sqlite_engine: Engine) -> None:
    async with api_for(sqlite_engine, max_step_input_values=42) as api:
        document = (await api.client.get("/openapi.json")).json()
    source = document["components"]["schemas"]["InputSource"]["properties"]
    assert source["max"]["anyOf"][0]["maximum"] == 42
    assert document["info"]["x-limits"]["maxStepInputValues"] == 42
    assert source["field"]["pattern"] == r"^[^.]+(\.[^.]+)*$"
