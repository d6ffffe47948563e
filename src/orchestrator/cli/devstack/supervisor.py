"""``DevStack``: starts, watches and stops the stack's processes from their descriptions.

Each child runs in its own session and process group, so a terminal's Ctrl-C reaches only
the supervisor, which decides the shutdown order, and a kill reaches anything the child forked.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Final

from orchestrator.cli.devstack.components import (
    COMPONENTS,
    DESCRIPTIONS,
    EMULATOR_TOKEN,
    HOST,
    SCALABLE,
    Component,
    Instance,
    PortInUseError,
    Spawned,
    StackError,
    StackPorts,
)
from orchestrator.config.settings import Settings

logger = logging.getLogger(__name__)

#: The local stack's admin API key lives here (mode 0600); ``orchestrator submit`` reads it.
DEV_API_KEY_FILE: Final = "dev-api-key"
#: The local stack's own server secrets (mode 0600, ``VARIABLE=value`` lines), generated once
#: and given to every API and worker process; ``orchestrator keys create`` reads them too.
DEV_SECRETS_FILE: Final = "dev-secrets.env"
DEV_SECRET_VARIABLES: Final = ("ORCHESTRATOR_WEBHOOK_SECRET", "ORCHESTRATOR_CALLBACK_SECRET_KEY")

DEFAULT_STARTUP_TIMEOUT_SECONDS: Final = 60.0
DEFAULT_STOP_TIMEOUT_SECONDS: Final = 10.0
_PROBE_INTERVAL_SECONDS: Final = 0.25
_LOG_TAIL_MAX_BYTES: Final = 64 * 1024
_START_MARKER: Final = "===== "
#: Settings for a secured Temporal (config/temporal.py); the stack's children get them blank.
TEMPORAL_CONNECTION_VARIABLES: Final = tuple(
    f"ORCHESTRATOR_{name.upper()}"
    for name in Settings.model_fields
    if name.startswith(("temporal_tls", "temporal_api_key"))
)
#: Ports one process listens on for its metrics (observability/exposition.py).
PROCESS_METRICS_VARIABLES: Final = (
    "ORCHESTRATOR_WORKER_METRICS_PORT",
    "ORCHESTRATOR_TEMPORAL_METRICS_PORT",
)
DEFAULT_PORTS: Final = StackPorts()


@dataclass
class _Running:
    process: subprocess.Popen[bytes]
    started_at: float  # wall clock, comparable with Temporal's poller timestamps

    @property
    def spawned(self) -> Spawned:
        return Spawned(pid=self.process.pid, started_at=self.started_at)


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


class DevStack:
    """Supervises the local stack's processes; see the package docstring.

    Use as a context manager (``with DevStack(var_dir, ports) as stack: ...``) or call
    :meth:`start` and :meth:`stop`. Each child runs in its own session/process group, so a
    Ctrl-C in the terminal reaches only us, and we decide the shutdown order.

    ``apis`` and ``workers`` run that many API and worker processes (the scale-out variant:
    all on one Temporal server, one emulator and one database; API ``n`` listens on
    ``ports.api + n - 1``). Methods that take a component's ``name`` take an instance name
    (:attr:`instances`): ``worker`` when one worker runs, ``worker-1`` … ``worker-N`` when
    several do; logs are per instance (``logs/worker-2.log``).
    """

    def __init__(
        self,
        var_dir: Path,
        ports: StackPorts = DEFAULT_PORTS,
        extra_env: Mapping[str, str] | None = None,
        emulator_time_scale: float | None = None,
        temporal_ui: bool = True,
        log_dir: Path | None = None,
        *,
        components: Sequence[str] = COMPONENTS,
        commands: Mapping[str, Sequence[str]] | None = None,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_SECONDS,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT_SECONDS,
        apis: int = 1,
        workers: int = 1,
    ) -> None:
        unknown = sorted((set(components) | set(commands or {})) - set(COMPONENTS))
        if unknown:
            raise ValueError(f"unknown components {unknown}; choose from {list(COMPONENTS)}")
        if apis < 1 or workers < 1:
            raise ValueError(f"a stack runs at least one API and one worker, not {apis}/{workers}")
        # Absolute, so the SQLite URLs handed to children do not depend on their cwd.
        self.var_dir = var_dir.resolve()
        self.ports = ports
        self.log_dir = (log_dir or self.var_dir / "logs").resolve()
        self.temporal_ui = temporal_ui
        self.components: tuple[str, ...] = tuple(c for c in COMPONENTS if c in components)
        counts = {"api": apis, "worker": workers}
        assert set(counts) == set(SCALABLE)
        # Every process the stack runs, by name, in start order.
        self._instances: dict[str, Instance] = {
            instance.name: instance
            for kind in self.components
            for instance in (
                Instance(kind, number, counts.get(kind, 1))
                for number in range(1, counts.get(kind, 1) + 1)
            )
        }
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
        self._unsaved_api_key = False
        self._dev_secrets: dict[str, str] | None = None
        self._unsaved_dev_secrets = False

    def __repr__(self) -> str:
        running = [name for name in self.instances if self.is_running(name)]
        return f"DevStack(var_dir={str(self.var_dir)!r}, ports={self.ports!r}, running={running!r})"

    # -- configuration -------------------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """The stack's environment: every component's settings together (also handy for
        running CLI commands in tests). Each child gets the shared part and its own.

        It may contain secrets: never print or log it.
        """
        env = self._shared_env()
        for kind in COMPONENTS:
            # The first instance of each kind speaks for it (e.g. the first API's port).
            env.update(DESCRIPTIONS[kind](self, Instance(kind)).env)
        # A metrics port is one process's listening socket: another process started with
        # this environment (a test's own API beside its worker) must not try to bind it too.
        for variable in PROCESS_METRICS_VARIABLES:
            env.pop(variable, None)
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
                # Ours too: a shell holding production secrets must not lend them to us.
                **self.dev_secrets,
                "ORCHESTRATOR_PUBLIC_URL": f"http://{HOST}:{self.ports.api}",
                "ORCHESTRATOR_API_HOST": HOST,
                "ORCHESTRATOR_API_PORT": str(self.ports.api),
                # Logs must reach the files as they happen, not when a buffer fills.
                "PYTHONUNBUFFERED": "1",
            }
        )
        # The local dev server speaks plaintext: a remote cluster's TLS settings and API key
        # (from the shell or .env) must not reach the stack. Blank means unset.
        env.update(dict.fromkeys(TEMPORAL_CONNECTION_VARIABLES, ""))
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
        one kept in ``<var>/dev-api-key``, else a new one (``save_api_key`` keeps it there
        when the API starts). The API registers it on start. It is a secret: never log it."""
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
                from orchestrator.security.api_keys import generate_api_key

                self._api_key = generate_api_key().plaintext
                self._unsaved_api_key = True
        return self._api_key

    def save_api_key(self) -> None:
        """Write a newly generated admin key to ``<var>/dev-api-key`` (mode 0600, never
        overwritten), so it survives restarts and ``orchestrator submit`` finds it."""
        key = self.api_key
        if not self._unsaved_api_key:
            return
        self.var_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.var_dir / DEV_API_KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(key + "\n")
        self._unsaved_api_key = False

    @property
    def dev_secrets(self) -> dict[str, str]:
        """The stack's server secrets (``DEV_SECRET_VARIABLES`` → value): those kept in
        ``<var>/dev-secrets.env``, and new random ones for any missing there
        (``save_dev_secrets`` keeps them when the first process starts), so they survive
        restarts. Secrets: never log them."""
        if self._dev_secrets is None:
            path = self.var_dir / DEV_SECRETS_FILE
            kept = _read_env_file(path) if path.is_file() else {}
            self._dev_secrets = {
                name: kept.get(name) or secrets.token_urlsafe(32) for name in DEV_SECRET_VARIABLES
            }
            self._unsaved_dev_secrets = any(not kept.get(name) for name in DEV_SECRET_VARIABLES)
        return dict(self._dev_secrets)

    def save_dev_secrets(self) -> None:
        """Write newly generated secrets to ``<var>/dev-secrets.env`` (mode 0600)."""
        values = self.dev_secrets
        if not self._unsaved_dev_secrets:
            return
        self.var_dir.mkdir(parents=True, exist_ok=True)
        path = self.var_dir / DEV_SECRETS_FILE
        partial = path.with_name(path.name + ".new")
        partial.unlink(missing_ok=True)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(
                "# Secrets of the local stack (orchestrator dev), generated once; local only.\n"
            )
            f.writelines(f"{name}={value}\n" for name, value in values.items())
        os.replace(partial, path)  # whole or not at all
        self._unsaved_dev_secrets = False

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
        """Where each selected component listens, by name (``temporal`` is a gRPC address;
        ``api`` is the first API, ``api-2`` … the others)."""
        return {
            endpoint.key: endpoint.url
            for name in self.instances
            for endpoint in self.component(name).endpoints
        }

    @property
    def instances(self) -> tuple[str, ...]:
        """The name of every process the stack runs, in start order."""
        return tuple(self._instances)

    def instances_of(self, kind: str) -> tuple[str, ...]:
        """The names of the processes of one kind (``("worker-1", "worker-2")``)."""
        return tuple(name for name, i in self._instances.items() if i.kind == kind)

    def api_port(self, number: int = 1) -> int:
        """The port API process ``number`` (1-based) listens on."""
        return self.ports.api + number - 1

    @property
    def api_urls(self) -> list[str]:
        """The base URL of every API process, in order."""
        return [f"http://{HOST}:{self.api_port(i.number)}" for i in self._of_kind("api")]

    def _of_kind(self, kind: str) -> list[Instance]:
        return [i for i in self._instances.values() if i.kind == kind]

    def component(self, name: str) -> Component:
        """The description of process ``name`` (an instance name) as this stack configures it."""
        instance = self._instance(name)
        described = DESCRIPTIONS[instance.kind](self, instance)
        if instance.kind in self.commands:
            # A replaced command line keeps the component's wiring, ports and probe.
            command = list(self.commands[instance.kind])
            described = replace(described, argv=lambda: list(command))
        return described

    def _instance(self, name: str) -> Instance:
        found = self._instances.get(name)
        if found is not None:
            return found
        known = self.instances_of(name)
        if known:
            raise ValueError(f"{name!r} runs as {list(known)}; name one of them")
        raise ValueError(f"unknown component {name!r}; choose from {list(self.instances)}")

    def _check_name(self, name: str) -> None:
        self._instance(name)

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
        """Every process's log tail, headed by its name (for test failures)."""
        parts = []
        for name in self.instances:
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
            for name in self.instances
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
            for name in self.instances:
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
        self.save_dev_secrets()  # before any process holds them: they must not change later
        component = self.component(name)
        if component.prepare is not None:
            component.prepare()
        argv = component.argv()
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
            if probe(running.spawned):
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
        for name in reversed(self.instances):
            self.stop_component(name)
        atexit.unregister(self.stop)

    def kill_all(self) -> None:
        """SIGKILL every component (the escape hatch for an impatient second Ctrl-C)."""
        for name in reversed(self.instances):
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


def _read_env_file(path: Path) -> dict[str, str]:
    """``VARIABLE=value`` lines of a file we wrote (comments and blank lines skipped)."""
    found: dict[str, str] = {}
    for line in path.read_text("utf-8").splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and not name.startswith("#"):
            found[name.strip()] = value.strip()
    return found


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
