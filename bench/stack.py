"""Starting the stack for a benchmark, and the small clients and probes the scenarios use.

One *platform* stack (Temporal dev server + emulator) lives for the whole benchmark, so the
orchestrator and every baseline read the same emulator instance. On top of it one *app*
stack (API + worker) is started per database (a fresh SQLite file, then a fresh PostgreSQL
database), each on its own task queue, and stopped before the next one starts, so two
workers never compete.

Trade-off: reusing ``DevStack`` (the supervisor behind ``orchestrator dev``) instead of
starting processes here means the benchmark measures exactly what users run, with the
supervisor's readiness checks, at the cost of the stack's own process layout (e.g. the
worker's pid is the ``python -m orchestrator worker`` process).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from threading import Event, Thread
from typing import Any, Final

import httpx
from sqlalchemy import create_engine, text

from orchestrator.cli.devstack import DevStack, StackPorts

HOST: Final = "127.0.0.1"
EMULATOR_TOKEN: Final = "emulator-token"  # noqa: S105 - the emulator's public default
POSTGRES_ADMIN_URL: Final = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
#: Emulator speed: scripted durations are multiplied by this.
TIME_SCALE: Final = 0.5
#: The poll interval of the benchmark's workers (the poll-only latency target is this + 2 s).
POLL_INTERVAL_SECONDS: Final = 5.0

#: The platform emulator, tuned for benchmarking: no per-resource rate limit, and no
#: concurrency or memory caps (the fan-out scenario starts 100 runs of 256 MB at once).
EMULATOR_ENV: Final = {
    "APIFY_EMULATOR_RATE_LIMIT_RPS": "0",
    "APIFY_EMULATOR_MAX_CONCURRENT_RUNS": "0",
    "APIFY_EMULATOR_MAX_TOTAL_MEMORY_MBYTES": "0",
    "APIFY_EMULATOR_LOG_LEVEL": "WARNING",
}

#: The emulator's usage figures lag its runs by 5 scripted seconds (its ``usage_lag_secs``).
EMULATOR_USAGE_LAG_SECONDS: Final = 5.0 * TIME_SCALE

#: The orchestrator's processes: short long-polls and retries, the default page size, and a
#: usage settle window just past the emulator's lag (the default is for the real platform).
APP_ENV: Final = {
    "ORCHESTRATOR_POLL_INTERVAL_SECONDS": repr(POLL_INTERVAL_SECONDS),
    "ORCHESTRATOR_POLL_LONG_WAIT_SECONDS": "1",
    "ORCHESTRATOR_CAPACITY_RETRY_SECONDS": "1",
    "ORCHESTRATOR_INGEST_HEARTBEAT_SECONDS": "30",
    "ORCHESTRATOR_USAGE_SETTLE_SECONDS": repr(EMULATOR_USAGE_LAG_SECONDS + 0.5),
    # The emulator above enforces no rate limit, so the orchestrator paces nothing either
    # (its per-dataset default, 50 pages a second, would otherwise cap every ingest figure).
    "ORCHESTRATOR_PLATFORM_RATE_LIMIT_PER_RESOURCE": "0",
    "ORCHESTRATOR_PLATFORM_RATE_LIMIT_RUN_STARTS": "0",
    "ORCHESTRATOR_PLATFORM_RATE_LIMIT_OVERALL": "0",
}


# Ports are chosen below the kernel's ephemeral range: a stack stopped and started again (a
# restart, a killed API) binds its ports a second time, and in the ephemeral range an
# outgoing connection made meanwhile can take one (seen: "address already in use").
LOWEST_PORT: Final = 10_000
_EPHEMERAL_RANGE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 right now, none handed out before in this
    process, none in the ephemeral range (where the kernel has no room, any free ports)."""
    try:
        ephemeral_low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32_768  # Linux's default
    candidates = [p for p in range(LOWEST_PORT, ephemeral_low) if p not in _handed_out]
    random.shuffle(candidates)
    with ExitStack() as stack:
        ports: list[int] = []
        for port in candidates:
            if len(ports) == count:
                break
            sock = stack.enter_context(socket.socket())
            try:
                sock.bind((HOST, port))
            except OSError:
                continue
            ports.append(port)
        while len(ports) < count:  # no room below the ephemeral range
            sock = stack.enter_context(socket.socket())
            sock.bind((HOST, 0))
            ports.append(sock.getsockname()[1])
    _handed_out.update(ports)
    return ports


def api_headers(stack: DevStack) -> dict[str, str]:
    """Headers for the orchestrator's API: the stack's bootstrap admin key, if it has one.

    ``DevStack`` puts its admin key (``ORCHESTRATOR_BOOTSTRAP_ADMIN_KEY``) into the children's
    environment and the API registers it on start; an orchestrator without API keys has
    none, and then no header is sent.
    """
    key = stack.env.get("ORCHESTRATOR_BOOTSTRAP_ADMIN_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def parse_time(value: str) -> float:
    """Epoch seconds of an ISO-8601 timestamp as the API and the emulator write them."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


# -- PostgreSQL ------------------------------------------------------------------------------


@contextlib.contextmanager
def postgres_database(label: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one part of the run; dropped afterwards."""
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"bench_{label}_{secrets.token_hex(4)}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin.url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def postgres_version() -> str:
    admin = create_engine(POSTGRES_ADMIN_URL)
    try:
        with admin.connect() as conn:
            return str(conn.execute(text("SHOW server_version")).scalar_one())
    finally:
        admin.dispose()


# -- memory ----------------------------------------------------------------------------------


def read_status_kib(pid: int, field: str) -> int | None:
    """A ``/proc/<pid>/status`` field in KiB (e.g. VmRSS, VmHWM), or None if unreadable."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (``/proc/<pid>/stat``), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # utime and stime are fields 14 and 15 of stat(5); fields[0] here is field 3.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RssSampler:
    """Samples a process's VmRSS every ``interval`` seconds on a thread; keeps the peak."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid = pid
        self.interval = interval
        self.peak_kib = 0
        self.samples = 0
        self._stop = Event()
        self._thread = Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            value = read_status_kib(self.pid, "VmRSS")
            if value is not None:
                self.peak_kib = max(self.peak_kib, value)
                self.samples += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# -- the stacks ------------------------------------------------------------------------------


@dataclass
class Platform:
    """The long-lived part: Temporal dev server and emulator."""

    stack: DevStack
    emulator: httpx.Client

    @property
    def emulator_url(self) -> str:
        return self.stack.urls["emulator"]

    def reset_stats(self) -> None:
        self.emulator.post("/_emulator/stats/reset").raise_for_status()

    def stats(self) -> dict[str, Any]:
        response = self.emulator.get("/_emulator/stats")
        response.raise_for_status()
        data: dict[str, Any] = response.json()["data"]
        return data

    def platform_run(self, run_id: str) -> dict[str, Any]:
        response = self.emulator.get(f"/v2/actor-runs/{run_id}")
        response.raise_for_status()
        data: dict[str, Any] = response.json()["data"]
        return data

    def drop_webhooks(self) -> None:
        self.emulator.post(
            "/_emulator/faults/webhooks", json={"action": "drop", "count": None}
        ).raise_for_status()

    def clear_faults(self) -> None:
        self.emulator.delete("/_emulator/faults").raise_for_status()

    def generator_dataset(self, run_input: dict[str, Any], timeout: float = 120) -> str:
        """Start a generator run with ``run_input``, wait for SUCCEEDED, return its dataset."""
        response = self.emulator.post(
            "/v2/actors/ultron~generator/runs",
            params={"memory": 256, "waitForFinish": 60},
            content=json.dumps(run_input),
            headers={"Content-Type": "application/json"},
        )
        response.raise_for_status()
        run: dict[str, Any] = response.json()["data"]
        deadline = time.monotonic() + timeout
        while run["status"] != "SUCCEEDED":
            if run["status"] not in ("READY", "RUNNING") or time.monotonic() > deadline:
                raise RuntimeError(f"generator run ended {run['status']}")
            reply = self.emulator.get(f"/v2/actor-runs/{run['id']}", params={"waitForFinish": 10})
            reply.raise_for_status()
            run = reply.json()["data"]
        return str(run["defaultDatasetId"])


@contextlib.contextmanager
def platform_stack(var_dir: Path) -> Iterator[Platform]:
    """Temporal + emulator on free ports, for the whole benchmark."""
    temporal, temporal_ui, emulator, api = free_ports(4)
    stack = DevStack(
        var_dir / "platform",
        StackPorts(temporal=temporal, temporal_ui=temporal_ui, emulator=emulator, api=api),
        extra_env=EMULATOR_ENV,
        emulator_time_scale=TIME_SCALE,
        temporal_ui=False,
        components=("temporal", "emulator"),
    )
    with stack:
        client = httpx.Client(
            base_url=stack.urls["emulator"],
            timeout=60,
            headers={"Authorization": f"Bearer {EMULATOR_TOKEN}"},
        )
        with client:
            yield Platform(stack=stack, emulator=client)


@dataclass
class App:
    """API + worker on one database."""

    stack: DevStack
    api: httpx.Client
    database_url: str

    @property
    def worker_pid(self) -> int:
        pid = self.stack.pid("worker")
        assert pid is not None
        return pid

    def start_workers(self, count: int) -> None:
        """Make sure the first ``count`` worker instances run (each ready before the next)."""
        run_workers(self.stack, count)

    def component_pids(self, platform: Platform) -> dict[str, int]:
        found: dict[str, int] = {}
        for stack, names in (
            (platform.stack, ("temporal", "emulator")),
            (self.stack, ("api", "worker")),
        ):
            for name in names:
                pid = stack.pid(name)
                if pid is not None:
                    found[name] = pid
        return found

    def submit(self, body: dict[str, Any]) -> str:
        response = self.api.post("/runs", json=body)
        if response.status_code != 202:
            raise RuntimeError(f"POST /runs answered {response.status_code}: {response.text}")
        run_id: str = response.json()["runId"]
        return run_id

    def run(self, run_id: str) -> dict[str, Any]:
        response = self.api.get(f"/runs/{run_id}")
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def wait_terminal(self, run_id: str, timeout: float, interval: float = 0.5) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            run = self.run(run_id)
            if run["terminal"]:
                return run
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} not terminal after {timeout:.0f} s")
            time.sleep(interval)

    def events(self, run_id: str, max_pages: int = 10_000) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(max_pages):
            params: dict[str, Any] = {"limit": 1000}
            if cursor:
                params["cursor"] = cursor
            response = self.api.get(f"/runs/{run_id}/events", params=params)
            response.raise_for_status()
            page = response.json()
            found.extend(page["events"])
            cursor = page["nextCursor"]
            if cursor is None:
                break
        return found


@contextlib.contextmanager
def app_stack(
    platform: Platform,
    var_dir: Path,
    database_url: str,
    label: str,
    *,
    workers: int = 1,
    start_workers: int | None = None,
) -> Iterator[App]:
    """API + worker(s) against ``database_url``, wired to the shared platform stack.

    ``workers`` instances are described; only the first ``start_workers`` (default: all)
    are started, the others wait for ``App.start_workers`` (the load adds workers to a
    running stack instead of starting another).
    """
    base = platform.stack.ports
    (api_port,) = free_ports(1)
    env = {
        **APP_ENV,
        "ORCHESTRATOR_DATABASE_URL": database_url,
        # A task queue per app stack: a worker of an earlier phase can never take its tasks.
        "ORCHESTRATOR_TASK_QUEUE": f"bench-{label}-{secrets.token_hex(3)}",
    }
    stack = DevStack(
        var_dir / f"app-{label}",
        StackPorts(
            temporal=base.temporal,
            temporal_ui=base.temporal_ui,
            emulator=base.emulator,
            api=api_port,
        ),
        extra_env=env,
        temporal_ui=False,
        components=("api", "worker"),
        workers=workers,
    )
    try:
        stack.start_component("api")
        run_workers(stack, workers if start_workers is None else start_workers)
        client = httpx.Client(base_url=stack.urls["api"], timeout=60, headers=api_headers(stack))
        with client:
            yield App(stack=stack, api=client, database_url=database_url)
    finally:
        stack.stop()


def run_workers(stack: DevStack, count: int) -> None:
    """Make sure the first ``count`` worker instances run (each ready before the next)."""
    for name in stack.instances_of("worker")[:count]:
        if not stack.is_running(name):
            stack.start_component(name)
