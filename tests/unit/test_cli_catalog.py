"""``orchestrator actors …``: the catalog commands, against the real API in process."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine
from typer.testing import CliRunner

from orchestrator.cli import main as cli
from tests.unit.api_harness import Api, api_for


class _InProcess(httpx.BaseTransport):
    """A synchronous transport onto the ASGI app (the CLI's client is synchronous), without
    the app's lifespan (which would connect to Temporal)."""

    def __init__(self, app: Any) -> None:
        self.asgi = httpx.ASGITransport(app=app)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        async def send() -> httpx.Response:
            response = await self.asgi.handle_async_request(request)
            content = await response.aread()
            return httpx.Response(response.status_code, headers=response.headers, content=content)

        request.read()
        return asyncio.run(send())


@pytest.fixture
async def api(sqlite_engine: Engine) -> AsyncIterator[Api]:
    async with api_for(sqlite_engine) as a:
        yield a


@pytest.fixture
def run_cli(api: Api, monkeypatch: pytest.MonkeyPatch) -> Any:
    def client(_url: str, key: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key or api.admin_key}"}
        return httpx.Client(
            transport=_InProcess(api.app), base_url="http://api.test", headers=headers
        )

    monkeypatch.setattr(cli, "_api_client", client)
    runner = CliRunner()

    def run(*args: str) -> Any:
        return runner.invoke(cli.app, list(args))

    return run


def test_list_show_put_history_remove(run_cli: Any, api: Api, tmp_path: Path) -> None:
    name = f"x-cli-{secrets.token_hex(3)}"
    listed = run_cli("actors")  # no command: the list, as before
    assert listed.exit_code == 0, listed.output
    assert "ultron-leadgen" in listed.output and "catalog version" in listed.output
    assert "ultron-leadgen" in run_cli("actors", "list").output

    shown = run_cli("actors", "show", "ultron-similarweb-bulk")
    assert shown.exit_code == 0, shown.output
    entry = json.loads(shown.output)
    assert entry["capabilities"] == ["web-traffic"]

    # What `show` prints is what `put` takes: a copy under a new name.
    path = tmp_path / "entry.json"
    path.write_text(json.dumps({**entry, "description": "a copy"}))
    put = run_cli("actors", "put", name, str(path))
    assert put.exit_code == 0, put.output
    assert f"created {name}" in put.output
    version = int(put.output.split("version ")[1].split(")")[0])
    stale = run_cli("actors", "put", name, str(path), "--if-version", str(version - 1))
    assert stale.exit_code == 1 and "412 precondition-failed" in stale.output

    history = run_cli("actors", "history", name)
    assert history.exit_code == 0 and "created" in history.output
    removed = run_cli("actors", "remove", name)
    assert removed.exit_code == 0 and f"removed {name} (version {version + 1})" in removed.output
    missing = run_cli("actors", "show", name)
    assert missing.exit_code == 1 and "404 not-found" in missing.output


def test_a_bad_entry_file_names_the_field(run_cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"platformActorId": "a~b", "inputSchema": {"type": "objekt"}}))
    refused = run_cli("actors", "put", "x-bad", str(path))
    assert refused.exit_code == 1
    assert "422 validation-failed" in refused.output and "/inputSchema" in refused.output


def test_a_workspace_key_may_list_but_not_change(run_cli: Any, api: Api, tmp_path: Path) -> None:
    key, _ = api.workspace_key(f"ws_cli{secrets.token_hex(3)}")
    assert run_cli("actors", "list", "--api-key", key).exit_code == 0
    refused = run_cli("actors", "remove", "ultron-leadgen", "--api-key", key)
    assert refused.exit_code == 1 and "403 forbidden" in refused.output
