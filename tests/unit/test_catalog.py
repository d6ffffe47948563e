"""The actor catalog as data: entry validation, input schemas, the bundled entries, and the
versioned change log on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from pydantic import ValidationError
from sqlalchemy import Engine, insert

from apify_emulator.actors import ACTORS, plan_run
from apify_emulator.errors import ApiError
from orchestrator.config.bootstrap import bundled_registry_text
from orchestrator.db.engine import alembic_config, build_engine
from orchestrator.db.queries import catalog as catalog_queries
from orchestrator.db.queries import registry
from orchestrator.db.schema import shared_config
from orchestrator.domain.errors import NotFound, ValidationFailed
from orchestrator.domain.input_schema import input_error, json_pointer, schema_error
from orchestrator.service import catalog
from orchestrator.service.auth import Principal
from orchestrator.service.commands import ActorRun
from orchestrator.service.errors import PreconditionFailed
from orchestrator.service.submission import check_input
from tests.conftest import fresh_postgres_database

ROOT = Path(__file__).parents[2]
BUNDLED = registry.load_registry_file(bundled_registry_text())
ADMIN = Principal(key_id="k_admin", workspace_id=None)


def entry(**fields: Any) -> registry.ActorEntry:
    return registry.ActorEntry.model_validate({"platformActorId": "someone~actor", **fields})


def bundled(name: str) -> registry.ActorEntry:
    return registry.ActorEntry.model_validate(BUNDLED[name])


# --- entries ------------------------------------------------------------------------------


def test_every_bundled_entry_has_capabilities_a_schema_and_output_fields() -> None:
    for name, raw in BUNDLED.items():
        parsed = registry.ActorEntry.model_validate(raw)
        assert parsed.capabilities and parsed.output_fields, name
        assert parsed.input_schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert bundled("ultron-leadgen").capabilities == ["leads"]
    assert bundled("ultron-similarweb-bulk").capabilities == ["web-traffic"]
    assert "domain" in {f.name for f in bundled("ultron-leadgen").output_fields}
    assert "domains" in bundled("ultron-similarweb-bulk").input_schema["properties"]


def test_an_entry_without_catalog_fields_accepts_any_input() -> None:
    # Entries stored before the catalog have none of the new fields.
    old = registry.ActorEntry.model_validate_json('{"platformActorId": "ultron~leadgen"}')
    assert old.capabilities == [] and old.input_schema == {} and old.output_fields == []
    assert input_error(old.input_schema, {"anything": [1, {"at": "all"}]}) is None


@pytest.mark.parametrize(
    ("fields", "location", "message"),
    [
        ({"capabilities": ["Leads"]}, ("capabilities", 0), "pattern"),
        ({"capabilities": ["web traffic"]}, ("capabilities", 0), "pattern"),
        ({"capabilities": ["leads", "leads"]}, ("capabilities",), "repeat"),
        ({"inputSchema": {"type": "objekt"}}, ("inputSchema",), "at /type"),
        ({"inputSchema": {"properties": {"a": {"minimum": "1"}}}}, ("inputSchema",), "minimum"),
        ({"inputSchema": []}, ("inputSchema",), "dictionary"),
        ({"outputFields": [{"name": "domain", "type": "text"}]}, ("outputFields", 0, "type"), ""),
        ({"outputFields": [{"name": "", "type": "string"}]}, ("outputFields", 0, "name"), ""),
        (
            {"outputFields": [{"name": "a", "type": "string"}, {"name": "a", "type": "any"}]},
            ("outputFields",),
            "repeat",
        ),
        ({"defaults": {"maxTotalChargeUsd": False}}, ("defaults", "maxTotalChargeUsd"), ""),
        ({"defaults": {"memoryMb": "1024"}}, ("defaults", "memoryMb"), ""),
        ({"platformActorID": "x"}, ("platformActorID",), "Extra"),
    ],
)
def test_a_bad_entry_is_refused_naming_the_field(
    fields: dict[str, Any], location: tuple[Any, ...], message: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        entry(**fields)
    error = caught.value.errors()[0]
    assert error["loc"] == location
    assert message in error["msg"]


def test_integral_numbers_are_integers_as_in_json_schema() -> None:
    assert entry(caps={"maxItems": 313.0}).caps.max_items == 313
    with pytest.raises(ValidationError):
        entry(caps={"maxItems": 313.5})


def test_parse_entry_names_the_field_as_a_json_pointer() -> None:
    with pytest.raises(ValidationFailed) as caught:
        catalog.parse_entry({"platformActorId": "a", "capabilities": ["ok", "Not ok"]})
    assert caught.value.field == "/capabilities/1"
    with pytest.raises(ValidationFailed) as missing:
        catalog.parse_entry({})
    assert missing.value.field == "/platformActorId"


# --- schemas and inputs -------------------------------------------------------------------


def test_schema_errors_point_into_the_schema() -> None:
    assert schema_error({"type": "object", "properties": {"a": {"type": "string"}}}) is None
    error = schema_error({"properties": {"a": {"type": 5}}})
    assert error is not None and error.pointer == "/properties/a/type"


def test_json_pointers_escape_tilde_and_slash() -> None:
    assert json_pointer(["a/b", "c~d", 0]) == "/a~1b/c~0d/0"
    assert json_pointer([]) == ""


def test_a_bad_input_names_runs_n_input_and_the_path() -> None:
    leadgen = bundled("ultron-leadgen")
    spec = ActorRun(actor="ultron-leadgen", input={"icp": {"titles": ["CFO", 7]}})
    with pytest.raises(ValidationFailed) as caught:
        check_input(spec, leadgen, 2)
    # The most relevant error (jsonschema's best_match) points into the anyOf branch.
    assert caught.value.field == "/runs/2/input/icp/titles/1"
    assert caught.value.detail.startswith("/runs/2/input/icp/titles/1: 7 is not of type")
    assert "ultron-leadgen" in caught.value.detail
    with pytest.raises(ValidationFailed) as domains:
        check_input(
            ActorRun(actor="s", input={"domains": "a.com"}), bundled("ultron-similarweb-bulk"), 0
        )
    assert domains.value.field == "/runs/0/input/domains"
    assert "not of type 'array'" in domains.value.detail


def test_a_long_value_is_not_echoed_whole() -> None:
    error = input_error(
        {"type": "object", "properties": {"a": {"type": "integer"}}}, {"a": "y" * 5000}
    )
    assert error is not None and len(error.message) <= 300


def test_a_remote_ref_is_never_fetched() -> None:
    schema = {"$ref": "https://example.invalid/schema.json"}
    assert schema_error(schema) is None  # a valid schema...
    error = input_error(schema, {})  # ...whose reference is not resolved over the network
    assert error is not None and "unresolvable" in error.message


def _inputs_sent_by_tests_bench_and_examples() -> list[tuple[str, dict[str, Any]]]:
    demo = json.loads((ROOT / "examples/demo.json").read_text())
    sent = [(run["actor"], run.get("input", {})) for run in demo["runs"]]
    leadgen_inputs: list[dict[str, Any]] = [
        {},
        {"brief": "b"},
        {"x": "y" * 5000},
        {"q": "é", "n": [1, 2]},
        {"brief": {"targetCount": 12}},
        {
            "brief": {"product": "Payroll software", "targetCount": 20},
            "icp": {
                "industries": ["Manufacturing", "Logistics"],
                "titles": ["HR Director", "CFO"],
                "regions": ["Europe"],
                "companySize": "200-1000",
            },
        },
        {
            "brief": {"product": "Fleet telematics", "targetCount": 50},
            "icp": {"industry": "Logistics", "region": "GB", "companySize": {"min": 1000}},
            "maxLeads": 3,
        },
        {"brief": {"maxLeads": 4}, "icp": {"companySize": "1000+"}},
        {"brief": "CTOs", "icp": "SaaS", "maxLeads": 2},
    ]
    generator_inputs: list[dict[str, Any]] = [
        {},
        {"items": 4, "durationSecs": 1},
        {"items": 5, "durationSecs": 1, "finalStatus": "FAILED", "failureMessage": "Scripted"},
        {"items": 2, "finalStatus": "TIMED-OUT", "failureMessage": "Actor timed out"},
        {"items": 30, "durationSecs": 1, "hang": True},
        {"items": 1, "stuck": True},
        {"items": 10, "seed": "marker"},
        {"items": 30_000, "itemBytes": 200, "durationSecs": 1, "pageDelayMs": 600},
        {"items": 100, "itemBytes": 500, "durationSecs": 0.25, "seed": "bench-1"},
    ]
    sent += [("ultron-leadgen", i) for i in leadgen_inputs]
    sent += [("ultron-generator", i) for i in generator_inputs]
    sent += [("ultron-similarweb-bulk", {"domains": ["example.com", "example.org"]})]
    sent += [("ultron-similarweb-bulk", {"domains": []})]
    return sent


@pytest.mark.parametrize(("actor", "run_input"), _inputs_sent_by_tests_bench_and_examples())
def test_the_bundled_schemas_accept_what_tests_bench_and_examples_send(
    actor: str, run_input: dict[str, Any]
) -> None:
    assert input_error(bundled(actor).input_schema, run_input) is None


@pytest.mark.parametrize(
    "run_input",
    [
        {"brief": 42},
        {"brief": ["CTOs"]},
        {"icp": ["SaaS"]},
        {"brief": {"targetCount": -1}},
        {"brief": {"targetCount": "ten"}},
        {"brief": {"product": 7}},
        {"icp": {"industries": ["SaaS", 3]}},
        {"icp": {"titles": [""]}},
        {"icp": {"regions": {"eu": True}}},
        {"icp": {"companySize": "big"}},
        {"brief": {}, "maxLeads": "all"},
        {"durationSecs": -1},
    ],
)
def test_the_leadgen_schema_refuses_what_the_emulator_refuses(run_input: dict[str, Any]) -> None:
    # The emulator's own list of unusable inputs (tests/emulator/test_leadgen_inputs.py),
    # less two a schema cannot state (min above max, a size starting at 0).
    (leadgen,) = [a for a in ACTORS if a.name == "leadgen"]
    with pytest.raises(ApiError):
        plan_run(leadgen, run_input, None)
    assert input_error(bundled("ultron-leadgen").input_schema, run_input) is not None


@pytest.mark.parametrize(("actor", "run_input"), _inputs_sent_by_tests_bench_and_examples())
def test_what_the_schemas_accept_the_emulator_accepts(
    actor: str, run_input: dict[str, Any]
) -> None:
    kind = {"ultron-leadgen": "leadgen", "ultron-similarweb-bulk": "similarweb-bulk"}
    (definition,) = [a for a in ACTORS if a.name == kind.get(actor, "generator")]
    plan_run(definition, run_input, None)  # raises ApiError on an input it cannot use


# --- the versioned catalog (both databases) ------------------------------------------------


def _clean(engine: Engine, *names: str) -> None:
    with engine.begin() as conn:
        for name in names:
            registry.delete_actor(conn, name, changed_by="test")


def test_every_change_is_one_version_with_its_history(engine: Engine) -> None:
    name = f"x-versioned-{engine.dialect.name}"
    with engine.begin() as conn:
        before = catalog_queries.current_version(conn)
        created = catalog.put_entry(conn, name, entry(capabilities=["leads"]), caller=ADMIN)
        assert created.created and created.changed
        assert created.saved.version == before + 1
        # The same entry again is no change and no version.
        same = catalog.put_entry(conn, name, entry(capabilities=["leads"]), caller=ADMIN)
        assert not same.created and not same.changed and same.saved.version == before + 1
        replaced = catalog.put_entry(
            conn, name, entry(capabilities=["web-traffic"]), caller=ADMIN, expected=before + 1
        )
        assert replaced.changed and replaced.saved.version == before + 2
        deleted = catalog.remove_entry(conn, name, caller=ADMIN)
        assert deleted.version == before + 3 and deleted.entry is None
        assert catalog_queries.current_version(conn) == before + 3
        changes = catalog.entry_history(conn, name)
    assert [(c.version, c.change) for c in changes] == [
        (before + 1, "created"),
        (before + 2, "replaced"),
        (before + 3, "deleted"),
    ]
    assert changes[0].entry is not None and changes[0].entry["capabilities"] == ["leads"]
    assert {c.changed_by for c in changes} == {"key:k_admin"}
    assert all(c.changed_at.tzinfo is not None for c in changes)


def test_if_match_refuses_a_stale_or_missing_entry(engine: Engine) -> None:
    name = f"x-if-match-{engine.dialect.name}"
    try:
        with engine.begin() as conn:
            with pytest.raises(PreconditionFailed):
                catalog.put_entry(conn, name, entry(), caller=ADMIN, expected="*")
            version = catalog.put_entry(conn, name, entry(), caller=ADMIN).saved.version
            with pytest.raises(PreconditionFailed) as stale:
                catalog.put_entry(
                    conn, name, entry(description="b"), caller=ADMIN, expected=version - 1
                )
            assert stale.value.field == "If-Match"
            with pytest.raises(PreconditionFailed):
                catalog.remove_entry(conn, name, caller=ADMIN, expected=version + 1)
            kept = catalog.put_entry(conn, name, entry(description="b"), caller=ADMIN, expected="*")
            assert kept.changed
    finally:
        _clean(engine, name)


def test_seeding_counts_as_a_change_only_when_it_writes(engine: Engine) -> None:
    # Names of its own: the PostgreSQL database is shared by the session.
    document = {f"x-seed-{engine.dialect.name}-{n}": raw for n, raw in BUNDLED.items()}
    try:
        with engine.begin() as conn:
            before = catalog_queries.current_version(conn)
            assert registry.seed_registry(conn, document) == len(document)
            version = catalog_queries.current_version(conn)
            assert version == before + len(document)
            assert registry.seed_registry(conn, document) == 0
            assert registry.seed_registry(conn, document, overwrite=True) == 0
            assert catalog_queries.current_version(conn) == version
            read = catalog.read_catalog(conn)
        assert read.version == version
        seeded = [e for e in read.entries if e.name in document]
        assert sorted(e.version for e in seeded) == list(range(before + 1, version + 1))
        with engine.connect() as conn:
            authors = {c.changed_by for e in seeded for c in catalog.entry_history(conn, e.name)}
        assert authors == {"seed"}
    finally:
        _clean(engine, *document)


def test_unknown_names_are_not_found(engine: Engine) -> None:
    with engine.begin() as conn:
        for call in (
            lambda: catalog.get_entry(conn, "x-never-there"),
            lambda: catalog.remove_entry(conn, "x-never-there", caller=ADMIN),
            lambda: catalog.entry_history(conn, "x-never-there"),
            lambda: catalog.get_entry(conn, "../etc"),
        ):
            with pytest.raises(NotFound):
                call()
        with pytest.raises(ValidationFailed) as bad:
            catalog.put_entry(conn, "bad name", entry(), caller=ADMIN)
        assert bad.value.field == "name"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def unmigrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of the test's own (the migration is the thing under test)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'before.db'}"
    else:
        with fresh_postgres_database() as url:
            yield url


def test_the_migration_records_existing_entries_as_the_first_versions(unmigrated_url: str) -> None:
    engine = build_engine(unmigrated_url)
    try:
        config = alembic_config(engine)
        command.upgrade(config, "0010_budget_stop")
        with engine.begin() as conn:
            for name in ("b-actor", "a-actor"):
                conn.execute(
                    insert(shared_config).values(
                        key=f"actor:{name}",
                        value_json='{"platformActorId": "u~x"}',
                        updated_at=datetime.now(UTC),
                    )
                )
        command.upgrade(config, "head")
        with engine.begin() as conn:
            assert catalog_queries.current_version(conn) == 2
            (first,) = catalog_queries.history(conn, "a-actor")
            assert (first.version, first.change, first.changed_by) == (1, "created", "migration")
            assert first.entry == {"platformActorId": "u~x"}
        command.downgrade(config, "0010_budget_stop")
        command.upgrade(config, "head")
    finally:
        engine.dispose()


def test_fields_provided_later_count_as_present_only_for_required() -> None:
    from orchestrator.domain.input_schema import input_error

    schema = {
        "type": "object",
        "required": ["domains", "window"],
        "properties": {"domains": {"type": "array"}, "window": {"type": "string"}},
    }
    later = frozenset({"domains"})
    assert input_error(schema, {"window": "3m"}, provided_later=later) is None
    missing = input_error(schema, {}, provided_later=later)
    assert missing is not None and "'window' is a required property" in missing.message
    # A value that is there is still checked, even if the field is also built later.
    wrong = input_error(schema, {"window": 3}, provided_later=later)
    assert wrong is not None and wrong.pointer == "/window"
    assert input_error(schema, {"window": "3m"}) is not None  # without it: missing
