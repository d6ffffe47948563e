"""The dashboard in a real browser (issue 12, point 6): Playwright drives Debian's chromium
(``/usr/bin/chromium``, installed by ``make``'s install step; Playwright's own browser
download is never used) headless against the session's real stack.

The demo button runs examples/brief.json: the page shows the plan (each step's actor, why
it was chosen, its estimated cost), each step's state as it runs, the web-traffic step fed
by the leads' domains (its input count), and the rows. A refused key says so.
Every wait is Playwright's auto-waiting ``expect``; nothing sleeps."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

from orchestrator.cli.devstack import DevStack

from .support import all_items

pytestmark = pytest.mark.e2e

CHROMIUM = Path("/usr/bin/chromium")
BRIEF = json.loads((Path(__file__).parents[2] / "examples" / "brief.json").read_text())
#: Long enough for the whole chain (leads, then web traffic) on a loaded machine.
RUN_TIMEOUT_MS = 120_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: `make .venv/.installed` installs chromium"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page (its own localStorage) whose console errors - a CSP violation, a
    script error - fail the test."""
    context = browser.new_context()
    opened = context.new_page()
    errors: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error" and "401" not in message.text:
            errors.append(message.text)

    opened.on("console", on_console)
    opened.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield opened
        assert errors == [], errors
    finally:
        context.close()


def workspace_key(stack: DevStack, workspace: str) -> str:
    with httpx.Client(base_url=stack.urls["api"], timeout=30, headers=stack.api_headers) as admin:
        issued = admin.post("/admin/keys", json={"workspaceId": workspace, "name": "browser"})
        assert issued.status_code == 201, issued.text
        key: str = issued.json()["apiKey"]
        return key


def use_key(page: Page, stack: DevStack, key: str) -> None:
    page.goto(stack.urls["api"] + "/dashboard")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Use key").click()


def test_the_demo_button_plans_the_brief_and_runs_its_chain(stack: DevStack, page: Page) -> None:
    workspace = f"ws_browser_{secrets.token_hex(3)}"
    key = workspace_key(stack, workspace)
    use_key(page, stack, key)
    page.get_by_label("workspace").fill(workspace)
    page.get_by_role("button", name="Run the demo brief").click()

    # The plan: leads first, then web traffic fed by the leads' domains, with costs.
    plan = page.locator("#plan tbody tr")
    expect(plan).to_have_count(2)
    leads, traffic = plan.nth(0), plan.nth(1)
    expect(leads).to_contain_text("leads")
    expect(leads).to_contain_text("ultron-leadgen")
    expect(leads.locator("td.cost")).to_have_text(re.compile(r"^\$0\.\d{4}$"))
    expect(traffic).to_contain_text("web-traffic")
    expect(traffic).to_contain_text("ultron-similarweb-bulk")
    expect(traffic).to_contain_text("domains ← #0.domain")
    for step in (leads, traffic):
        expect(step.locator("td").nth(4)).not_to_be_empty()  # why it was chosen
    expect(page.locator("#plan-summary")).to_contain_text("planned for leads, web-traffic")
    expect(page.locator("#plan-summary")).to_contain_text("of a $1.0000 budget")

    # It runs to the end, both steps succeed, and the second was fed by the first.
    summary = page.locator("#run-summary")
    expect(summary).to_contain_text("succeeded (finished)", timeout=RUN_TIMEOUT_MS)
    expect(summary).to_contain_text("2/2 actor run(s) succeeded")
    for step in (leads, traffic):
        expect(step.locator("td.state")).to_have_text("succeeded")
    fed = page.locator('#children tr[data-child="1"] td.input-from')
    expect(fed).to_have_text(re.compile(r"^domains ← #0\.domain \(\d+\)$"))

    # What the page shows is what the API says: the built input's count is the number of
    # distinct domains among the leads, and the rows of both actors are on the page.
    run_id = page.locator("#run-title").text_content()
    assert run_id is not None and run_id.startswith("run_")
    with httpx.Client(
        base_url=stack.urls["api"], timeout=30, headers={"Authorization": f"Bearer {key}"}
    ) as api:
        run = api.get(f"/runs/{run_id}").json()
        items = all_items(api, run_id)
    domains = {i["data"]["domain"] for i in items if i["actor"] == "ultron-leadgen"}
    built = run["children"][1]["inputBuilt"]["domains"]
    assert built == len(domains) > 0
    expect(fed).to_have_text(f"domains ← #0.domain ({built})")
    assert run["children"][0]["itemsIngested"] == BRIEF["brief"]["targetCount"]
    rows = page.locator("#items")
    expect(rows).to_contain_text("ultron-leadgen")
    expect(rows).to_contain_text('"domain"')


def test_a_refused_key_says_so(stack: DevStack, page: Page) -> None:
    use_key(page, stack, "ork_not_a_key")
    status = page.get_by_role("status")
    expect(status).to_contain_text("The API key was refused (401")
    expect(status).to_contain_text("Paste a valid key")
    page.get_by_role("button", name="Run the demo brief").click()
    expect(status).to_contain_text("The API key was refused (401")
    expect(page.locator("#run-section")).to_be_hidden()
