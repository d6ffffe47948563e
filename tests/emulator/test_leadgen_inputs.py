"""The lead generator's inputs: the specification's object `brief` and `icp` drive the leads,
the older string shape still works, and unusable input is `invalid-input` with no run."""

from __future__ import annotations

from typing import Any

import pytest
from apify_client import ApifyClientAsync

from .conftest import local, make_config

SPEC_INPUT: dict[str, Any] = {
    "brief": {"product": "Payroll software for mid-size companies", "targetCount": 12},
    "icp": {
        "industries": ["Fintech", "Manufacturing"],
        "titles": ["CFO", "Head of People"],
        "regions": ["DACH", "North America"],
        "companySize": "51-200",
    },
}


async def leads(aclient: ApifyClientAsync, run_input: dict[str, Any]) -> list[dict[str, Any]]:
    run = await aclient.actor("ultron~leadgen").call(run_input=run_input, logger=None)
    assert run is not None and run.status == "SUCCEEDED"
    return (await aclient.dataset(run.default_dataset_id).list_items()).items


async def test_object_brief_and_icp_drive_the_leads(aclient: ApifyClientAsync) -> None:
    rows = await leads(aclient, SPEC_INPUT)

    assert [r["rank"] for r in rows] == list(range(1, 13))  # brief.targetCount
    icp = SPEC_INPUT["icp"]
    assert {r["industry"] for r in rows} <= set(icp["industries"])
    assert {r["title"] for r in rows} <= set(icp["titles"])
    assert {r["country"] for r in rows} <= {"DE", "US", "CA"}  # the regions' countries
    assert all(51 <= r["employees"] <= 200 for r in rows)
    # Twelve leads over two options each: both values of every target show up.
    assert len({r["industry"] for r in rows}) == 2 and len({r["title"] for r in rows}) == 2
    assert all(r["brief"] == SPEC_INPUT["brief"] and r["icp"] == icp for r in rows)

    # Deterministic: the same input gives the same leads, another ICP other leads.
    assert await leads(aclient, SPEC_INPUT) == rows
    other = await leads(aclient, {**SPEC_INPUT, "icp": {**icp, "titles": ["CTO"]}})
    assert {r["title"] for r in other} == {"CTO"} and other != rows


async def test_other_spellings_and_the_count_precedence(aclient: ApifyClientAsync) -> None:
    rows = await leads(
        aclient,
        {
            "brief": {"product": "Fleet telematics", "targetCount": 50},
            "icp": {"industry": "Logistics", "region": "GB", "companySize": {"min": 1000}},
            "maxLeads": 3,  # the actor's own cap wins over the brief's wish
        },
    )
    assert len(rows) == 3
    assert {(r["industry"], r["country"]) for r in rows} == {("Logistics", "GB")}
    assert all(r["employees"] >= 1000 for r in rows)

    plus = await leads(aclient, {"brief": {"maxLeads": 4}, "icp": {"companySize": "1000+"}})
    assert len(plus) == 4 and all(1000 <= r["employees"] <= 10000 for r in plus)

    # The emulator's first shape: strings, copied into each row; no brief at all is fine too.
    legacy = await leads(aclient, {"brief": "CTOs", "icp": "SaaS", "maxLeads": 2})
    assert [(r["brief"], r["icp"]) for r in legacy] == [("CTOs", "SaaS")] * 2
    assert len(await leads(aclient, {})) == 25


@pytest.mark.parametrize(
    ("run_input", "field"),
    [
        ({"brief": 42}, "'brief'"),
        ({"brief": ["CTOs"]}, "'brief'"),
        ({"icp": ["SaaS"]}, "'icp'"),
        ({"brief": {"targetCount": -1}}, "brief.targetCount"),
        ({"brief": {"targetCount": "ten"}}, "brief.targetCount"),
        ({"brief": {"product": 7}}, "brief.product"),
        ({"icp": {"industries": ["SaaS", 3]}}, "icp.industries"),
        ({"icp": {"titles": [""]}}, "icp.titles"),
        ({"icp": {"regions": {"eu": True}}}, "icp.regions"),
        ({"icp": {"companySize": "big"}}, "icp.companySize"),
        ({"icp": {"companySize": {"min": 200, "max": 50}}}, "icp.companySize"),
        ({"icp": {"size": "0-10"}}, "icp.size"),
        ({"brief": {}, "maxLeads": "all"}, "maxLeads"),
    ],
)
async def test_unusable_input_is_invalid_input_and_starts_nothing(
    run_input: dict[str, Any], field: str
) -> None:
    async with local(make_config()) as http:
        response = await http.post("/v2/actors/ultron~leadgen/runs", json=run_input)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid-input"
        assert field in error["message"]
        runs = await http.get("/v2/actor-runs")
        assert runs.json()["data"]["total"] == 0
