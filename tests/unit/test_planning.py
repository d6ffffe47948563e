"""The planner (``domain.planning``): choice, declared mappings, chaining order, cost and
the reasons it gives, and the errors that name the need that cannot be met."""

from __future__ import annotations

import dataclasses

import pytest

from orchestrator.domain.errors import ValidationFailed
from orchestrator.domain.planning import (
    BriefRequest,
    CatalogPlanner,
    ChainedInput,
    InputSource,
    NeedCannotBeMet,
    PlannableActor,
    RowsRule,
    estimate_charge_usd,
    resolve_path,
)
from orchestrator.domain.pricing import ActorPricing, ChargeEvent

PPE = ActorPricing(
    model="PAY_PER_EVENT",
    events={"apify-actor-start": ChargeEvent(0.00005), "lead": ChargeEvent(0.01)},
    minimal_max_total_charge_usd=0.02,
)
PER_RESULT = ActorPricing(model="PRICE_PER_DATASET_ITEM", price_per_unit_usd=0.002)

LEADGEN = PlannableActor(
    name="ultron-leadgen",
    capabilities=("leads",),
    inputs={"brief": (InputSource(path="brief"),), "icp": (InputSource(path="icp"),)},
    required=frozenset({"brief"}),
    rows=RowsRule(path="brief.targetCount", default=100),
    row_event="lead",
    pricing=PPE,
    memory_mb=1024,
)
SIMILARWEB = PlannableActor(
    name="ultron-similarweb-bulk",
    capabilities=("web-traffic",),
    inputs={
        "domains": (
            InputSource(path="brief.domains"),
            InputSource(need="leads", field="domain", max=500),
        )
    },
    required=frozenset({"domains"}),
    rows=RowsRule(per_value="domains"),
    pricing=PER_RESULT,
    memory_mb=512,
)
PRICEY_LEADS = PlannableActor(
    name="acme-leads",
    capabilities=("leads",),
    inputs={"query": (InputSource(path="brief.description"),)},
    required=frozenset({"query"}),
    rows=RowsRule(path="brief.targetCount", default=100),
    pricing=ActorPricing(model="PRICE_PER_DATASET_ITEM", price_per_unit_usd=0.05),
)
CATALOG = (SIMILARWEB, LEADGEN, PRICEY_LEADS)
BRIEF = {"description": "B2B SaaS in Berlin", "targetCount": 40}
ICP = {"industries": ["software"]}


def test_leads_then_web_traffic_on_their_domains() -> None:
    result = CatalogPlanner().plan(
        BriefRequest(needs=("web-traffic", "leads"), brief=BRIEF, icp=ICP), CATALOG
    )
    leads, traffic = result.steps  # the source comes first whatever the needs' order
    assert (leads.need, leads.actor, leads.index) == ("leads", "ultron-leadgen", 0)
    assert leads.input == {"brief": BRIEF, "icp": ICP}
    assert leads.expected_rows == 40
    assert leads.estimated_cost_usd == pytest.approx(0.00005 + 40 * 0.01)
    assert leads.minimum_charge_usd == 0.02
    assert "lowest estimated cost" in leads.why and "acme-leads $2.0000" in leads.why
    assert traffic.actor == "ultron-similarweb-bulk" and traffic.input == {}
    assert traffic.input_from == {"domains": ChainedInput(step=0, field="domain", max=500)}
    assert traffic.depends_on == (0,)
    assert traffic.expected_rows == 40  # one per lead's domain
    assert traffic.estimated_cost_usd == pytest.approx(40 * 0.002)
    assert result.estimated_cost_usd == pytest.approx(0.40005 + 0.08)
    assert result.expected_rows == 80
    assert result.strategy == "catalog" and result.notes == ()


def test_domains_in_the_brief_need_no_chain() -> None:
    result = CatalogPlanner().plan(
        BriefRequest(needs=("web-traffic",), brief={"domains": ["a.com", "b.com"]}, icp={}),
        CATALOG,
    )
    (step,) = result.steps
    assert step.input == {"domains": ["a.com", "b.com"]} and step.input_from == {}
    assert step.expected_rows == 2 and step.why.startswith("the only catalog actor")


def test_a_need_without_its_source_names_the_need_and_why() -> None:
    with pytest.raises(NeedCannotBeMet) as raised:
        CatalogPlanner().plan(BriefRequest(needs=("web-traffic",), brief=BRIEF, icp={}), CATALOG)
    assert raised.value.field == "/needs/0"
    assert "brief.domains is not in the brief" in raised.value.detail
    assert "no step meets need 'leads' (add it to needs)" in raised.value.detail


def test_an_unknown_capability_lists_the_known_ones() -> None:
    with pytest.raises(NeedCannotBeMet) as raised:
        CatalogPlanner().plan(BriefRequest(needs=("leads", "emails"), brief=BRIEF, icp={}), CATALOG)
    assert raised.value.field == "/needs/1"
    assert "known: leads, web-traffic" in raised.value.detail


def test_an_actor_whose_inputs_the_brief_lacks_is_passed_over_with_its_reason() -> None:
    result = CatalogPlanner().plan(
        BriefRequest(needs=("leads",), brief={"targetCount": 5}, icp={}), CATALOG
    )
    (step,) = result.steps
    assert step.actor == "ultron-leadgen"
    assert step.rejected == (
        "acme-leads: needs input 'query': brief.description is not in the brief",
    )


def test_limits_cap_the_rows_and_a_budget_below_the_estimate_is_noted() -> None:
    result = CatalogPlanner().plan(
        BriefRequest(
            needs=("leads",), brief=BRIEF, icp={}, limits={"maxItemsPerStep": 10}, budget_usd=0.05
        ),
        CATALOG,
    )
    (step,) = result.steps
    assert step.expected_rows == 10
    assert any("above the budget" in note for note in result.notes)
    with pytest.raises(ValidationFailed) as raised:
        CatalogPlanner().plan(
            BriefRequest(needs=("leads",), brief=BRIEF, icp={}, limits={"maxItemsPerStep": 0}),
            CATALOG,
        )
    assert raised.value.field == "/limits/maxItemsPerStep"


def test_planning_is_deterministic_and_ties_go_to_priority_then_name() -> None:
    twin = dataclasses.replace(LEADGEN, name="a-leads")
    favoured = dataclasses.replace(LEADGEN, name="z-leads", priority=5)
    request = BriefRequest(needs=("leads",), brief=BRIEF, icp={})
    first = CatalogPlanner().plan(request, (twin, favoured))
    again = CatalogPlanner().plan(request, (favoured, twin))
    assert first == again and first.steps[0].actor == "z-leads"


def test_needs_are_checked() -> None:
    for needs in ((), ("leads", "leads")):
        with pytest.raises(ValidationFailed) as raised:
            CatalogPlanner().plan(BriefRequest(needs=needs, brief=BRIEF, icp={}), CATALOG)
        assert raised.value.field == "/needs"


def test_estimates_follow_the_pricing_model() -> None:
    assert estimate_charge_usd(PPE, 3072, 10, "lead") == pytest.approx(3 * 0.00005 + 0.1)
    assert estimate_charge_usd(PER_RESULT, None, 7, None) == pytest.approx(0.014)
    assert estimate_charge_usd(ActorPricing(model="FREE"), 1024, 1000, None) == 0
    assert estimate_charge_usd(None, 1024, 1000, None) == 0


def test_paths_resolve_or_are_missing() -> None:
    context = {"brief": {"a": {"b": 3}}, "icp": {}}
    assert resolve_path(context, "brief.a.b") == 3
    assert resolve_path(context, "brief.a.c") is None
    assert resolve_path(context, "icp.x") is None
