"""Fixtures: an in-process emulator (uvicorn in a thread), a webhook receiver, and helpers.

The server runs in its own thread and event loop, so both the sync and the async
official clients can talk to it from tests without sharing the test loop.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import httpx
import pytest
import uvicorn
from apify_client import ApifyClient, ApifyClientAsync
from bench.stack import free_ports
from starlette.applications import Starlette

from apify_emulator import EmulatorConfig, create_app
from apify_emulator.app import Emulator

TOKEN = "emulator-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TIME_SCALE = 0.05
T = TypeVar("T")


@dataclass
class RunningEmulator:
    app: Starlette
    url: str
    server: uvicorn.Server
    thread: threading.Thread

    @property
    def emulator(self) -> Emulator:
        em: Emulator = self.app.state.emulator
        return em

    def control(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = httpx.request(method, f"{self.url}/_emulator{path}", json=body, timeout=10)
        response.raise_for_status()
        return response.json()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def start_emulator(cfg: EmulatorConfig) -> RunningEmulator:
    app = create_app(cfg)
    server = uvicorn.Server(
        uvicorn.Config(
            app, host=cfg.host, port=cfg.port, log_level="warning", timeout_graceful_shutdown=1
        )
    )
    thread = threading.Thread(target=server.run, daemon=True, name="apify-emulator")
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("emulator did not start")
        time.sleep(0.01)
    return RunningEmulator(app, f"http://{cfg.host}:{cfg.port}", server, thread)


def make_config(**changes: Any) -> EmulatorConfig:
    base = EmulatorConfig(
        port=free_ports(1)[0],
        time_scale=TIME_SCALE,
        webhook_retry_base_secs=1.0,
        rate_limit_rps=0,
        lost_answer_hang_secs=5,
    )
    return base.replace(**changes)


def local(cfg: EmulatorConfig) -> httpx.AsyncClient:
    """An httpx client wired straight to a fresh app (no sockets, no background ticker)."""
    transport = httpx.ASGITransport(app=create_app(cfg))
    return httpx.AsyncClient(transport=transport, base_url="http://emulator", headers=AUTH)


@pytest.fixture(scope="session")
def server() -> Iterator[RunningEmulator]:
    running = start_emulator(make_config())
    yield running
    running.stop()


@pytest.fixture(autouse=True)
def _clean_faults(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "server" in request.fixturenames:
        running: RunningEmulator = request.getfixturevalue("server")
        running.emulator.faults.clear()


def client_kwargs(url: str) -> dict[str, Any]:
    return {
        "api_url": url,
        "api_public_url": url,
        "min_delay_between_retries": timedelta(milliseconds=20),
        "max_retries": 4,
    }


@pytest.fixture
def client(server: RunningEmulator) -> ApifyClient:
    return ApifyClient(TOKEN, **client_kwargs(server.url))


@pytest.fixture
def aclient(server: RunningEmulator) -> ApifyClientAsync:
    return ApifyClientAsync(TOKEN, **client_kwargs(server.url))


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class WebhookReceiver:
    """A stdlib HTTP server that records POSTs; `statuses` scripts the answers (then 200)."""

    url: str = ""
    received: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def for_path(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path == path]


@pytest.fixture(scope="session")
def receiver() -> Iterator[WebhookReceiver]:
    state = WebhookReceiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            raw = self.rfile.read(length)
            with state.lock:
                state.received.append(
                    Received(
                        self.path, {k.lower(): v for k, v in self.headers.items()}, json.loads(raw)
                    )
                )
                status = state.statuses.pop(0) if state.statuses else 200
            self.send_response(status)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)
