"""The README's walk-through, as a user runs it (issue 12, point 6): ``orchestrator submit
examples/brief.json --watch`` against the real stack plans the brief, runs leads then web
traffic for the leads' domains, and the watch table shows the chain to the end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli.devstack import DevStack

from .support import all_items, api_client

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).parents[2]
ORCHESTRATOR = Path(sys.executable).parent / "orchestrator"


def test_submit_watch_runs_the_brief_and_shows_the_chain(stack: DevStack) -> None:
    key = stack.api_headers["Authorization"].removeprefix("Bearer ")
    command = [str(ORCHESTRATOR), "submit", "examples/brief.json", "--watch"]
    watched = subprocess.run(
        [*command, "--api-url", stack.urls["api"], "--api-key", key],
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "220"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert watched.returncode == 0, watched.stdout + watched.stderr
    out = watched.stdout
    run_id = re.search(r"accepted: (run_\w+)", out)
    assert run_id is not None, out
    # The last table drawn: the plan's needs, both steps, the second fed by the first.
    final = out[out.rindex(f"{run_id.group(1)} — succeeded") :]
    assert "planned for leads, web-traffic" in final
    fed = re.search(
        r"web-traffic\s*│\s*ultron-similarweb-bulk\s*│\s*domains ← #0\.domain \((\d+)\)", final
    )
    assert fed is not None, final
    assert re.search(r"\(plan estimate \$0\.\d{4}\) of a \$1\.0000 budget", final), final

    with api_client(stack) as api:
        run = api.get(f"/runs/{run_id.group(1)}").json()
        items = all_items(api, run_id.group(1))
    brief = json.loads((ROOT / "examples" / "brief.json").read_text())
    assert run["plan"]["needs"] == brief["needs"]
    assert [c["state"] for c in run["children"]] == ["succeeded", "succeeded"]
    domains = {i["data"]["domain"] for i in items if i["actor"] == "ultron-leadgen"}
    assert int(fed.group(1)) == run["children"][1]["inputBuilt"]["domains"] == len(domains)
    assert run["children"][0]["itemsIngested"] == brief["brief"]["targetCount"]
    assert f"succeeded: {run['itemsTotal']} item(s)" in out
