"""The CLI commands that derive workspace secrets (``keys create``, ``workspaces
rotate-secret``) need the callback server key: the environment's, else the local stack's
generated one in var/dev-secrets.env; without either they refuse by name."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli.devstack import DevStack
from orchestrator.cli.main import app
from orchestrator.db.engine import build_engine
from orchestrator.service.workspaces import signing_secrets

WORKSPACE = "ws_cli_secrets"


@pytest.fixture(autouse=True)
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory like a checkout's: the CLI's defaults point into its var/."""
    for name in [n for n in os.environ if n.startswith("ORCHESTRATOR_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "var").mkdir()
    return tmp_path


def cli(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output.splitlines()


def current_secret(server_key: str) -> str:
    engine = build_engine("sqlite:///var/orchestrator.db")
    try:
        with engine.begin() as conn:
            return signing_secrets(conn, WORKSPACE, server_key=server_key, now=datetime.now(UTC))[0]
    finally:
        engine.dispose()


def test_without_a_server_key_the_commands_refuse_by_name() -> None:
    for command in (
        ("keys", "create", "--workspace", WORKSPACE),
        ("workspaces", "rotate-secret", WORKSPACE),
    ):
        code, output = cli(*command)
        assert code == 2, output
        assert "ORCHESTRATOR_CALLBACK_SECRET_KEY is not set" in " ".join(output)


def test_the_local_stacks_generated_key_is_used(checkout: Path) -> None:
    stack = DevStack(checkout / "var")
    stack.save_dev_secrets()
    server_key = stack.dev_secrets["ORCHESTRATOR_CALLBACK_SECRET_KEY"]

    code, output = cli("keys", "create", "--workspace", WORKSPACE)
    assert code == 0, output
    assert output[-1] == current_secret(server_key)  # the secret the API and workers derive
    code, output = cli("workspaces", "rotate-secret", WORKSPACE)
    assert code == 0, output
    assert current_secret(server_key) in output


def test_the_environment_wins_over_the_local_stacks_key(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    DevStack(checkout / "var").save_dev_secrets()
    mine = "an-operator-callback-server-key-0123456789"
    monkeypatch.setenv("ORCHESTRATOR_CALLBACK_SECRET_KEY", mine)
    code, output = cli("keys", "create", "--workspace", WORKSPACE)
    assert code == 0, output
    assert output[-1] == current_secret(mine)
