"""The app keeps the contract its OpenAPI document states, under generated input.

Schemathesis reads the served document and runs its examples and coverage phases and a short
derandomized fuzzing phase against the app in process (real database, fake Temporal), with
every check: statuses, content types, headers and bodies as documented; schema-valid
requests accepted, schema-violating ones refused; 405s with a complete ``Allow``.

A few rules no schema can state are taught to the generator instead of excused from the
checks: a cursor must be one the API handed out, an ``Idempotency-Key`` belongs to one
request, a callback URL must name a public host (and rows pushed to the callback need
one), a webhook carries its child's token, a budget leaves every run a share of at least
its actor's minimum charge (as does a run's own ``maxTotalChargeUsd``), a run's input
satisfies its actor's catalog schema, a catalog entry's ``inputSchema`` is a valid JSON
Schema and its defaults stay under its caps, and a chained run takes its input from an
earlier run. Positive cases get such values (``before_call``); negative cases are left
alone, except that catalog edits go to actors of their own (the runs keep the catalog the
document was generated from).

The run goes through schemathesis's engine, the one its CLI drives (same phases, same
checks), rather than its pytest plugin, whose lazy ``from_fixture`` schemas fail on pytest
9.2; one test per key then reports every failure at once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

import pytest
import schemathesis
from fastapi import FastAPI
from pydantic import ValidationError
from schemathesis import Case
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events, from_schema
from schemathesis.hooks import HookContext
from schemathesis.schemas import BaseSchema
from temporalio.client import Client

from orchestrator.api.cursors import encode_item_cursor, encode_run_cursor
from orchestrator.api.deps import AppState
from orchestrator.api.routes.runs import parse_idempotency_key
from orchestrator.api.schemas import ActorRunRequest, CreateRunRequest
from orchestrator.app import create_app
from orchestrator.config.bootstrap import bundled_registry_text
from orchestrator.config.settings import Settings
from orchestrator.db.engine import build_engine, migrate
from orchestrator.db.queries.registry import (
    ActorEntry,
    list_actors,
    load_registry_file,
    seed_registry,
)
from orchestrator.db.queries.runs import insert_run
from orchestrator.delivery.url_guard import UnsafeCallbackUrl, check_callback_url
from orchestrator.domain.budget import QUANTUM_USD
from orchestrator.domain.input_schema import input_error, schema_error
from orchestrator.domain.pricing import minimum_charge_usd
from orchestrator.platform.webhook_auth import (
    WEBHOOK_CHILD_PARAM,
    WEBHOOK_TOKEN_HEADER,
    derive_webhook_token,
)
from orchestrator.service.auth import create_key
from orchestrator.service.submission import build_run
from orchestrator.service.usage import MAX_USAGE_DAYS
from tests.support.secrets import TEST_SECRETS
from tests.unit.api_harness import CALLBACK_KEY, FakeTemporal

WORKSPACE = "ws_contract"
#: Examples per operation in the fuzzing phase: the whole module stays well under two
#: minutes on two cores (about 55 s for both keys, measured with other work running); the
#: examples and coverage phases are not capped.
FUZZ_EXAMPLES = 60


@asynccontextmanager
async def _no_lifespan(_app: FastAPI) -> AsyncIterator[None]:
    yield


class _Handle:
    async def signal(self, *_: Any) -> None:
        """Pollers are not running here; the webhook's signal goes nowhere."""

    async def cancel(self) -> None: ...


class _Temporal(FakeTemporal):
    def get_workflow_handle(self, workflow_id: str) -> Any:
        return _Handle()


class ContractApp:
    def __init__(self, tmp: Path) -> None:
        url = f"sqlite:///{tmp / 'contract.db'}"
        self.engine = build_engine(url)
        migrate(self.engine)
        with self.engine.begin() as conn:
            seed_registry(conn, load_registry_file(bundled_registry_text()))
            self.admin_key = create_key(
                conn, workspace_id=None, name="admin", callback_secret_key=CALLBACK_KEY
            ).plaintext
            self.workspace_key = create_key(
                conn, workspace_id=WORKSPACE, name="contract", callback_secret_key=CALLBACK_KEY
            ).plaintext
        settings = Settings(database_url=url, **TEST_SECRETS)
        self.app: FastAPI = create_app(settings)
        # The ASGI client runs the lifespan, which would connect to Temporal; the state is
        # set here instead, as in tests/unit/api_harness.
        self.app.router.lifespan_context = _no_lifespan
        self.app.state.orchestrator = AppState(
            settings=settings, engine=self.engine, temporal=cast(Client, _Temporal())
        )
        with self.engine.begin() as conn:
            request = CreateRunRequest(runs=[ActorRunRequest(actor="ultron-leadgen")])
            run = build_run(request.to_command(), list_actors(conn), workspace_id=WORKSPACE)
            insert_run(conn, run)
        #: A child that exists, so valid webhooks get past the look-up.
        self.child_id = run.children[0].id
        self.webhook_secret = settings.secret("webhook_secret")
        #: Idempotency-Key → fingerprint of the one body it was sent with.
        self.idempotency: dict[str, str] = {}
        #: Whether the run under way uses the admin key.
        self.as_admin = False
        #: The bundled catalog: the actors POST /runs names (edits go to other names).
        self.actors: dict[str, ActorEntry] = {}
        with self.engine.connect() as conn:
            self.actors.update(list_actors(conn))
        self.app.state.contract = self


@pytest.fixture
def contract(tmp_path: Path) -> Iterator[ContractApp]:
    """A database of each test's own: the admin run revokes keys it finds, for one."""
    app = ContractApp(tmp_path)
    yield app
    app.engine.dispose()


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _real_cursor(path: str, generated: str) -> str:
    """A cursor of the kind the API hands out, derived from the generated one."""
    n = len(generated)
    if path == "/runs":
        return encode_run_cursor((datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=n), "r"))
    return encode_item_cursor({0: n, 1: n // 2})


def _public_callback(url: str) -> str:
    try:
        check_callback_url(url)
        return url
    except UnsafeCallbackUrl:
        return f"https://hooks.example.com/cb/{_fingerprint(url)[:12]}"


def _valid_inputs(contract: ContractApp, runs: list[Any]) -> None:
    """An input its actor's schema refuses becomes {} (every bundled schema accepts it)."""
    for run in runs:
        entry = contract.actors.get(str(run.get("actor"))) if isinstance(run, dict) else None
        if entry is not None and input_error(entry.input_schema, run.get("input", {})):
            run["input"] = {}


def _valid_entry(body: dict[str, Any]) -> None:
    """A catalog entry whose schema is a schema and whose defaults are under its caps."""
    # Names that must not repeat (a rule JSON Schema cannot state for a list of objects).
    fields = body.get("outputFields")
    if isinstance(fields, list):
        seen: set[Any] = set()
        unique = []
        for item in fields:
            name = item.get("name") if isinstance(item, dict) else None
            if name not in seen:
                seen.add(name)
                unique.append(item)
        body["outputFields"] = unique
    capabilities = body.get("capabilities")
    if isinstance(capabilities, list):
        body["capabilities"] = list(dict.fromkeys(capabilities))
    schema = body.get("inputSchema")
    if isinstance(schema, dict) and schema_error(schema) is not None:
        body["inputSchema"] = {}
    defaults, caps = body.get("defaults"), body.get("caps")
    if isinstance(defaults, dict) and isinstance(caps, dict):
        for name in ("maxItems", "maxTotalChargeUsd"):
            cap, default = caps.get(name), defaults.get(name)
            if isinstance(cap, int | float) and isinstance(default, int | float) and default > cap:
                defaults[name] = cap
    # A pricing record whose fields belong to another model, or whose minimum charge is
    # above the entry's own limits, is refused: such cases get a free actor's record.
    # The same for a planning section whose sources mix their kinds (from, or need+field).
    for name, fallback in (("pricing", {"pricingModel": "FREE"}), ("planning", None)):
        if name not in body:
            continue
        try:
            ActorEntry.model_validate(body)
        except ValidationError:
            if fallback is None:
                body.pop(name)
            else:
                body[name] = fallback


# One free step (the generator): no minimum charge, so any budget of a share or more fits.
_PLANNABLE_BRIEF = {"needs": ["synthetic-rows"], "brief": {"targetCount": 5}}
_PLAN_FIELDS = ("planId", "needs", "brief", "icp", "limits")


def _one_way_to_run(body: dict[str, Any], *, planning: bool) -> None:
    """A request names one way to say what to run (runs, a plan id, or needs with a
    brief), and needs the catalog can meet (rules the schema cannot state)."""
    if planning:
        body.update(_PLANNABLE_BRIEF)
        return
    if body.get("runs") is not None:
        for name in _PLAN_FIELDS:
            body.pop(name, None)
    elif body.get("planId") is not None:
        for name in _PLAN_FIELDS[1:]:
            body.pop(name, None)
        # The plan's runs (free, from _PLANNABLE_BRIEF) each need a share of the budget;
        # a budget that covers the most runs a request may have covers any such plan.
        budget = body.get("budgetUsd")
        if isinstance(budget, float | int):
            most = Settings.model_fields["max_runs_per_request"].default
            body["budgetUsd"] = max(budget, float(QUANTUM_USD * most))
    else:
        body.pop("planId", None)
        body.pop("runs", None)
        body.update(_PLANNABLE_BRIEF)
        budget = body.get("budgetUsd")
        if isinstance(budget, float | int):
            body["budgetUsd"] = max(budget, float(QUANTUM_USD))


def _forward_period(query: dict[str, Any]) -> None:
    try:
        start, end = date.fromisoformat(str(query["from"])), date.fromisoformat(str(query["to"]))
    except ValueError:
        return
    if end < start:
        start, end = end, start
    end = min(end, start + timedelta(days=MAX_USAGE_DAYS - 1))
    query["from"], query["to"] = start.isoformat(), end.isoformat()


_BUNDLED = {
    name: ActorEntry.model_validate(raw)
    for name, raw in load_registry_file(bundled_registry_text()).items()
}


def _minimum_charge(run: Any) -> float:
    """A generated run's minimum charge (domain.pricing), 0 for an unknown actor."""
    entry = _BUNDLED.get(str(run.get("actor"))) if isinstance(run, dict) else None
    if entry is None:
        return 0.0
    options = run.get("options")
    memory = options.get("memoryMb") if isinstance(options, dict) else None
    memory = memory if isinstance(memory, int) else entry.defaults.memory_mb
    return minimum_charge_usd(entry.actor_pricing(), memory)


def _at_least_the_minimums(body: dict[str, Any], runs: list[Any]) -> None:
    for run in runs:
        options = run.get("options") if isinstance(run, dict) else None
        limit = options.get("maxTotalChargeUsd") if isinstance(options, dict) else None
        if isinstance(options, dict) and isinstance(limit, float | int):
            options["maxTotalChargeUsd"] = max(limit, _minimum_charge(run))
    budget = body.get("budgetUsd")
    if isinstance(budget, float | int):
        # Each run's share is at least QUANTUM_USD and its minimum charge (domain.budget).
        least = sum(max(QUANTUM_USD, Decimal(str(_minimum_charge(run)))) for run in runs)
        body["budgetUsd"] = max(budget, float(least))


def _earlier_sources(runs: list[Any]) -> None:
    """A chained run's sources name earlier runs, and fields not in its own input (rules
    between values, domain.chaining)."""
    for index, run in enumerate(runs):
        sources = run.get("inputFrom") if isinstance(run, dict) else None
        if not isinstance(sources, dict):
            continue
        own = run.get("input") if isinstance(run.get("input"), dict) else {}
        for name in list(sources):
            source = sources[name]
            if index == 0 or name in own or not isinstance(source, dict):
                del sources[name]
            elif isinstance(source.get("run"), int | float):  # 3.0 is a valid integer
                source["run"] = int(source["run"]) % index


@schemathesis.hook
def before_call(_context: HookContext, case: Case[Any], _kwargs: dict[str, Any]) -> None:
    """Positive cases get values for the rules the document cannot state (see above);
    catalog edits of every kind are kept off the actors the other operations use."""
    state = getattr(case.operation.schema.app, "state", None)  # None: not our app
    contract: ContractApp | None = getattr(state, "contract", None)
    if contract is None or case.meta is None:
        return
    if case.path.startswith("/admin/actors/") and case.path_parameters:
        # Catalog edits (valid or not) go to actors of their own, so the runs below keep the
        # catalog the document was generated from.
        name = str(case.path_parameters.get("name", ""))
        if name in contract.actors:
            case.path_parameters["name"] = f"x-{name}"
    if not case.meta.generation.mode.is_positive:
        return
    query = case.query or {}
    cursor = query.get("cursor")
    if isinstance(cursor, str) and cursor and not case.path.endswith("/events"):
        query["cursor"] = _real_cursor(case.path, cursor)
    body = case.body
    if case.path in ("/runs", "/plans") and isinstance(body, dict):
        _one_way_to_run(body, planning=case.path == "/plans")
    deliver = body.get("deliver") if isinstance(body, dict) else None
    if isinstance(deliver, dict) and deliver.get("rows") == "callback":
        # Rows pushed to the callback need a callback URL to push them to.
        assert isinstance(body, dict)
        body["callbackWebhook"] = body.get("callbackWebhook") or "https://hooks.example.com/rows"
    callback = body.get("callbackWebhook") if isinstance(body, dict) else None
    if isinstance(body, dict) and isinstance(callback, str):
        body["callbackWebhook"] = _public_callback(callback)
    runs = body.get("runs") if isinstance(body, dict) else None
    if isinstance(body, dict) and isinstance(runs, list):
        _at_least_the_minimums(body, runs)
        _earlier_sources(runs)
    if case.path == "/runs" and isinstance(runs, list):
        _valid_inputs(contract, runs)
    if case.path.startswith("/admin/actors/"):
        # An If-Match is a version only the API can know (a 412 otherwise).
        if case.headers:
            case.headers.pop("If-Match", None)
        if isinstance(body, dict):
            _valid_entry(body)
    if contract.as_admin and case.path in ("/runs", "/plans") and isinstance(body, dict):
        # An admin key names the workspace it submits for (the schema cannot say "required
        # for some keys"); a workspace key never needs to.
        body["workspaceId"] = body.get("workspaceId") or WORKSPACE
    if case.path.endswith("/usage") and {"from", "to"} <= query.keys():
        # A period runs forward and spans at most MAX_USAGE_DAYS (a rule between two values).
        _forward_period(query)
    if case.path == "/webhooks/platform" and case.headers and case.query:
        # Half the valid webhooks name the child that exists; all carry its real token.
        child = str(case.query.get(WEBHOOK_CHILD_PARAM, ""))
        if len(child) % 2 == 0:
            case.query[WEBHOOK_CHILD_PARAM] = child = contract.child_id
        case.headers[WEBHOOK_TOKEN_HEADER] = derive_webhook_token(contract.webhook_secret, child)
    raw = case.headers.get("Idempotency-Key") if case.headers else None
    if case.headers and isinstance(raw, str):
        fingerprint = _fingerprint(body)
        key = parse_idempotency_key(raw) or raw  # '"abc"' and 'abc' are one key to the API
        if contract.idempotency.setdefault(key, fingerprint) != fingerprint:
            fresh = f"k-{_fingerprint(raw, fingerprint)[:40]}"
            contract.idempotency[fresh] = fingerprint
            case.headers["Idempotency-Key"] = fresh


def _load(contract: ContractApp, key: str, *, only: str | None = None) -> BaseSchema:
    config = SchemathesisConfig.from_dict(
        {
            "seed": 20261201,
            "workers": 1,
            # No crash cache: a run replays nothing from an earlier one (and writes no files).
            "cache": {"enabled": False},
            "headers": {"Authorization": f"Bearer {key}"},
            "generation": {"deterministic": True, "database": "none"},
            "phases": {
                "examples": {"enabled": True},
                "coverage": {"enabled": True},
                "fuzzing": {"enabled": True, "generation": {"max-examples": FUZZ_EXAMPLES}},
                "stateful": {"enabled": False},
            },
        }
    )
    schema = schemathesis.openapi.from_asgi("/openapi.json", contract.app, config=config)
    return schema if only is None else schema.include(path_regex=only)


def _run(schema: BaseSchema) -> list[str]:
    """Every failed check and every error of a whole run, described for the assertion."""
    problems: list[str] = []
    tested = 0
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            tested += len(event.recorder.interactions)
            for case_id, checks in event.recorder.checks.items():
                for check in checks:
                    if check.failure_info is not None:
                        failure = check.failure_info.failure
                        case = event.recorder.cases[case_id].value
                        problems.append(
                            f"{event.phase.value} {case.method} {case.formatted_path}: "
                            f"{failure.title}: {failure.message}\n{check.failure_info.code_sample}"
                        )
        elif isinstance(event, events.NonFatalError | events.FatalError):
            problems.append(
                f"error: {getattr(event, 'value', None) or getattr(event, 'exception', None)}"
            )
    assert tested > 0, "schemathesis sent no request"
    return sorted(set(problems))


def test_every_operation_keeps_the_contract_with_a_workspace_key(contract: ContractApp) -> None:
    problems = _run(_load(contract, contract.workspace_key))
    assert not problems, "\n\n".join(problems)


def test_every_operation_keeps_the_contract_with_an_admin_key(contract: ContractApp) -> None:
    contract.as_admin = True
    problems = _run(_load(contract, contract.admin_key))
    assert not problems, "\n\n".join(problems)
