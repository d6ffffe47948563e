"""The dashboard page: served with a strict CSP, and it only calls routes the API has."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import Engine

from tests.unit.api_harness import Api, api_for


@pytest.fixture
async def api(sqlite_engine: Engine) -> AsyncIterator[Api]:
    async with api_for(sqlite_engine) as running:
        yield running


def api_calls(script: str) -> set[tuple[str, str]]:
    """(method, path template) of every ``api(method, path…)`` call in the script."""
    calls = set()
    for method, expression in re.findall(r'api\("(\w+)",\s*((?:"[^"]*"|\s*\+\s*|\w+)+)', script):
        path = re.sub(r'"\s*\+\s*\w+\s*\+\s*"|"\s*\+\s*\w+', "{run_id}", expression)
        path = path.strip('"').split("?")[0]
        calls.add((method.lower(), path))
    return calls


async def test_the_page_and_its_assets_are_served_without_a_key(api: Api) -> None:
    page = await api.client.get("/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert '<script src="/dashboard/app.js"' in page.text
    script = await api.client.get("/dashboard/app.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    style = await api.client.get("/dashboard/style.css")
    assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")


async def test_the_script_only_calls_routes_the_api_serves(api: Api) -> None:
    script = (await api.client.get("/dashboard/app.js")).text
    schema = (await api.client.get("/openapi.json")).json()
    served = {
        (method, re.sub(r"\{[^}]+\}", "{run_id}", path))
        for path, operations in schema["paths"].items()
        for method in operations
    }
    calls = api_calls(script)
    assert {
        ("get", "/runs"),
        ("post", "/runs"),
        ("get", "/runs/{run_id}"),
        ("get", "/runs/{run_id}/items"),
        ("get", "/runs/{run_id}/events"),
        ("post", "/runs/{run_id}/abort"),
    } <= calls
    assert calls <= served, calls - served


async def test_the_script_never_turns_data_into_markup(api: Api) -> None:
    script = (await api.client.get("/dashboard/app.js")).text
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script
