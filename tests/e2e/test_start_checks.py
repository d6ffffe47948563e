"""Issue 17, as an operator meets it: ``orchestrator api`` and ``orchestrator worker`` started
as real processes with a production-looking environment refuse public or missing secrets
(naming each, showing none) and start with real ones; the local stack needs no environment,
generates its secrets once under var/, and its API and worker use them across restarts."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench.stack import free_ports
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from orchestrator.cli.devstack import DevStack, StackPorts
from orchestrator.cli.devstack.supervisor import DEV_SECRET_VARIABLES, DEV_SECRETS_FILE
from orchestrator.config.safety import Process, review
from orchestrator.config.settings import Settings
from orchestrator.platform.webhook_auth import (
    WEBHOOK_CHILD_PARAM,
    WEBHOOK_TOKEN_HEADER,
    derive_webhook_token,
)
from tests.support.waiting import eventually, eventually_async

from .conftest import free_stack_ports
from .support import api_client, event_kinds, generator, request, submit, wait_terminal

pytestmark = pytest.mark.e2e

PUBLIC = Settings.DEVELOPMENT_SECRETS
START_TIMEOUT = 60.0


def clean_environment() -> dict[str, str]:
    """This process's environment without a single ORCHESTRATOR_* variable."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}


@pytest.fixture
def production(tmp_path: Path) -> dict[str, str]:
    """A production-looking environment, secrets apart (the platform is never called)."""
    return clean_environment() | {
        "ORCHESTRATOR_DATABASE_URL": f"sqlite:///{tmp_path / 'orchestrator.db'}",
        "ORCHESTRATOR_APIFY_API_URL": "https://api.apify.com",
        "ORCHESTRATOR_PUBLIC_URL": "https://orchestrator.example.com",
        "ORCHESTRATOR_TASK_QUEUE": f"start-checks-{secrets.token_hex(4)}",
        "PYTHONUNBUFFERED": "1",
    }


def real_secrets() -> dict[str, str]:
    return {
        "ORCHESTRATOR_WEBHOOK_SECRET": secrets.token_urlsafe(32),
        "ORCHESTRATOR_CALLBACK_SECRET_KEY": secrets.token_urlsafe(32),
        "ORCHESTRATOR_APIFY_TOKEN": "apify_api_" + secrets.token_urlsafe(27),
    }


def orchestrator(command: str, env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """Run ``orchestrator <command>`` to its end: exit code and everything it printed."""
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", command],
        env=env,
        cwd=cwd,  # no .env, no var/ of a developer's checkout
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[tuple[subprocess.Popen[bytes], Path]]]:
    """Processes a test starts (with their log files); stopped with SIGTERM afterwards."""
    processes: list[tuple[subprocess.Popen[bytes], Path]] = []
    yield processes
    for process, _ in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def start(
    started: list[tuple[subprocess.Popen[bytes], Path]],
    command: list[str],
    env: dict[str, str],
    cwd: Path,
) -> tuple[subprocess.Popen[bytes], Path]:
    log = cwd / f"{command[0]}-{len(started)}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", *command],
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    started.append((process, log))
    return process, log


@pytest.fixture(scope="module")
def temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Temporal dev server of this module's own; its address."""
    with DevStack(
        tmp_path_factory.mktemp("start-checks-temporal"),
        free_stack_ports(),
        temporal_ui=False,
        components=("temporal",),
    ) as stack:
        yield stack.temporal_address


@pytest.mark.parametrize("process", ["api", "worker"])
def test_missing_secrets_are_refused_by_name(
    process: str, production: dict[str, str], tmp_path: Path
) -> None:
    code, output = orchestrator(process, production, tmp_path)
    assert code == 2, output
    assert f"orchestrator {process} refuses to start" in output
    assert "ORCHESTRATOR_WEBHOOK_SECRET is not set" in output
    assert "ORCHESTRATOR_CALLBACK_SECRET_KEY is not set" in output
    # Only the worker calls the platform, so only the worker needs the Apify token.
    assert ("ORCHESTRATOR_APIFY_TOKEN is not set" in output) is (process == "worker")
    assert "Traceback" not in output
    # Refused before anything was done: no database was created or migrated.
    assert not (tmp_path / "orchestrator.db").exists()


@pytest.mark.parametrize("process", ["api", "worker"])
def test_public_values_and_unsafe_settings_are_refused_without_echoing_them(
    process: str, production: dict[str, str], tmp_path: Path
) -> None:
    short = secrets.token_urlsafe(12)  # 16 characters
    env = production | {
        # The built-in defaults of earlier versions, as an old .env file would have them.
        "ORCHESTRATOR_WEBHOOK_SECRET": PUBLIC["webhook_secret"],
        "ORCHESTRATOR_APIFY_TOKEN": PUBLIC["apify_token"],
        "ORCHESTRATOR_CALLBACK_SECRET_KEY": short,
        "ORCHESTRATOR_ALLOW_INSECURE_CALLBACK_LOCALHOST": "true",
    }
    code, output = orchestrator(process, env, tmp_path)
    assert code == 2, output
    expected = [
        "ORCHESTRATOR_WEBHOOK_SECRET has a public value",
        "ORCHESTRATOR_CALLBACK_SECRET_KEY is shorter than 32 characters",
        "ORCHESTRATOR_ALLOW_INSECURE_CALLBACK_LOCALHOST is true while ORCHESTRATOR_PUBLIC_URL "
        "is not a loopback address",
    ]
    if process == "worker":
        expected.append("ORCHESTRATOR_APIFY_TOKEN has a public value")
    for line in expected:
        assert line in output, output
    for value in (PUBLIC["webhook_secret"], PUBLIC["apify_token"], short):
        assert value not in output


def test_the_api_starts_with_real_secrets(
    production: dict[str, str],
    temporal: str,
    tmp_path: Path,
    started: list[tuple[subprocess.Popen[bytes], Path]],
) -> None:
    (port,) = free_ports(1)
    given = real_secrets()
    del given["ORCHESTRATOR_APIFY_TOKEN"]  # the API has no use for it
    env = production | given | {"ORCHESTRATOR_TEMPORAL_ADDRESS": temporal}
    process, log = start(
        started, ["api", "--host", "127.0.0.1", "--port", str(port)], env, tmp_path
    )

    def healthy() -> dict[str, Any]:
        assert process.poll() is None, log.read_text()
        answer: dict[str, Any] = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()
        return answer if answer.get("status") == "ok" else {}

    eventually(healthy, timeout=START_TIMEOUT, retry_on=(AssertionError, httpx.HTTPError))
    # The secrets are in use: a webhook for an unknown child with a good token gets past the
    # token check (404 "no such actor run"), one with a token of the public value does not.
    child = "run_unknown.0"
    for secret, status in (
        (given["ORCHESTRATOR_WEBHOOK_SECRET"], 404),
        (PUBLIC["webhook_secret"], 401),
    ):
        answer = httpx.post(
            f"http://127.0.0.1:{port}/webhooks/platform",
            params={WEBHOOK_CHILD_PARAM: child},
            headers={WEBHOOK_TOKEN_HEADER: derive_webhook_token(secret, child)},
            content=b"{}",
            timeout=10,
        )
        assert answer.status_code == status, answer.text
    text = log.read_text()
    assert all(value not in text for value in given.values())


async def _polled_by_a_worker(address: str, task_queue: str) -> bool:
    client = await Client.connect(address)
    described = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace="default",
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return len(described.pollers) > 0


@pytest.mark.parametrize("mode", ["real secrets", "development mode"])
async def test_the_worker_starts_and_polls(
    mode: str,
    production: dict[str, str],
    temporal: str,
    tmp_path: Path,
    started: list[tuple[subprocess.Popen[bytes], Path]],
) -> None:
    given = real_secrets() if mode == "real secrets" else {}
    env = production | given | {"ORCHESTRATOR_TEMPORAL_ADDRESS": temporal}
    if mode == "development mode":
        # No secret at all: the flag lets it start, with a warning for each problem.
        env["ORCHESTRATOR_INSECURE_DEV_MODE"] = "true"
    process, log = start(started, ["worker"], env, tmp_path)

    async def polling() -> bool:
        assert process.poll() is None, log.read_text()
        return await _polled_by_a_worker(temporal, env["ORCHESTRATOR_TASK_QUEUE"])

    await eventually_async(polling, timeout=START_TIMEOUT, interval=0.5)
    text = log.read_text()
    assert all(value not in text for value in given.values())
    if mode == "development mode":
        assert "ORCHESTRATOR_INSECURE_DEV_MODE=true: development mode, never in production" in text
        assert "ORCHESTRATOR_WEBHOOK_SECRET is not set" in text
        assert all(value not in text for value in PUBLIC.values())
    else:
        assert "INSECURE_DEV_MODE" not in text


# -- the local stack ----------------------------------------------------------------------


def test_the_stack_generates_its_secrets_once_and_passes_the_start_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in os.environ if n.startswith("ORCHESTRATOR_")]:
        monkeypatch.delenv(name)
    # A shell holding production secrets does not lend them to the local stack.
    monkeypatch.setenv("ORCHESTRATOR_WEBHOOK_SECRET", "a-production-secret-of-the-shell-0123")
    ports = StackPorts(temporal=1, temporal_ui=2, emulator=3, api=4)
    stack = DevStack(tmp_path, ports)
    generated = stack.dev_secrets
    assert sorted(generated) == sorted(DEV_SECRET_VARIABLES)
    assert len(set(generated.values())) == 2
    for name in ("api", "worker"):
        env = stack.child_env(name)
        assert {k: env[k] for k in generated} == generated
    assert not (tmp_path / DEV_SECRETS_FILE).exists()  # describing the stack writes nothing

    stack.save_dev_secrets()
    kept = tmp_path / DEV_SECRETS_FILE
    assert kept.stat().st_mode & 0o777 == 0o600
    assert DevStack(tmp_path, ports).dev_secrets == generated  # the same after a restart

    # What the API and the worker of the stack are given passes their start check.
    monkeypatch.delenv("ORCHESTRATOR_WEBHOOK_SECRET")
    processes: tuple[Process, ...] = ("api", "worker")
    for process in processes:
        for variable, value in stack.child_env(process).items():
            if variable.startswith("ORCHESTRATOR_"):
                monkeypatch.setenv(variable, value)
        found = review(Settings(_env_file=None), process)
        assert found.refusals == () and found.warnings == (), found

    # A test (or a developer) may still choose them, and a lost one is made again.
    chosen = {"ORCHESTRATOR_WEBHOOK_SECRET": "chosen-" + "w" * 32}
    assert (
        DevStack(tmp_path, ports, extra_env=chosen).child_env("worker")[
            "ORCHESTRATOR_WEBHOOK_SECRET"
        ]
        == chosen["ORCHESTRATOR_WEBHOOK_SECRET"]
    )
    kept.write_text(f"ORCHESTRATOR_WEBHOOK_SECRET={generated['ORCHESTRATOR_WEBHOOK_SECRET']}\n")
    completed = DevStack(tmp_path, ports)
    completed.save_dev_secrets()
    again = DevStack(tmp_path, ports).dev_secrets
    assert again["ORCHESTRATOR_WEBHOOK_SECRET"] == generated["ORCHESTRATOR_WEBHOOK_SECRET"]
    assert again["ORCHESTRATOR_CALLBACK_SECRET_KEY"] not in (
        "",
        generated["ORCHESTRATOR_CALLBACK_SECRET_KEY"],
    )


def _webhook(stack: DevStack, secret: str, child: str, platform_run: str, dispatch: str) -> int:
    body = b'{"eventType": "ACTOR.RUN.SUCCEEDED", "resource": {"id": "%s"}}' % platform_run.encode()
    return httpx.post(
        f"{stack.urls['api']}/webhooks/platform",
        params={WEBHOOK_CHILD_PARAM: child},
        headers={
            WEBHOOK_TOKEN_HEADER: derive_webhook_token(secret, child),
            "X-Apify-Webhook-Dispatch-Id": dispatch,
        },
        content=body,
        timeout=30,
    ).status_code


def test_the_stack_api_and_worker_use_the_generated_secrets_across_restarts(
    stack: DevStack, emulator: httpx.Client
) -> None:
    # The session's stack was given no secret: they come from its var/ alone.
    kept = stack.var_dir / DEV_SECRETS_FILE
    before = kept.read_text()
    secret = stack.dev_secrets["ORCHESTRATOR_WEBHOOK_SECRET"]
    assert f"ORCHESTRATOR_WEBHOOK_SECRET={secret}\n" in before
    with api_client(stack) as api:
        run_id = submit(api, request(generator(items=3, durationSecs=1)))
        run = wait_terminal(api, run_id)
        (child,) = run["children"]
        # The emulator delivered the webhook the worker registered (its token derived from
        # the generated secret) and the API accepted it: both hold the same secret.
        eventually(lambda: event_kinds(api, run_id)["child.webhook"] >= 1, timeout=30)
        assert _webhook(stack, secret, child["id"], child["platformRunId"], "mine-1") == 202
        assert (
            _webhook(stack, PUBLIC["webhook_secret"], child["id"], child["platformRunId"], "x")
            == 401
        )

        stack.restart("api")
        stack.restart("worker")
        assert kept.read_text() == before
        assert _webhook(stack, secret, child["id"], child["platformRunId"], "mine-2") == 202
        after = submit(api, request(generator(items=2, durationSecs=1)))
        assert wait_terminal(api, after)["state"] == "succeeded"
        eventually(lambda: event_kinds(api, after)["child.webhook"] >= 1, timeout=30)
