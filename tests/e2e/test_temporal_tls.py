"""A secured Temporal (issue 16): the local dev server behind Debian's nginx terminating TLS
with ``grpc_pass``, requiring a client certificate from our CA (mTLS) and an API key
(``authorization: Bearer <key>``, as Temporal Cloud takes it).

``orchestrator api`` and ``orchestrator worker`` run as processes that know only the
proxy's address and their TLS settings: a request runs to ``succeeded`` through them. A
process without the CA, with a client certificate from another CA, or without the API key
is refused — and says so at start, naming what to check, instead of hanging or retrying.
nginx answers its refusals as a Temporal server does: gRPC status 16 (UNAUTHENTICATED).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from bench.stack import free_ports

from orchestrator.cli.devstack import DevStack
from tests.support.tls import CertificateAuthority, Issued
from tests.support.waiting import eventually

from .conftest import E2E_EMULATOR_TIME_SCALE, E2E_ENV, free_stack_ports
from .support import wait_terminal

pytestmark = pytest.mark.e2e

NGINX = Path("/usr/sbin/nginx")
SERVER_NAME = "temporal.test"  # only in the server certificate: the override is needed
API_KEY = f"tmprl-test-{secrets.token_hex(12)}"
#: A refused process must have exited by then; it normally takes a few seconds.
EXIT_BOUND_SECONDS = 90
EXIT_CODES = {"worker": 1, "api": 3, "mcp": 1}


@dataclass(frozen=True)
class Pki:
    ca: CertificateAuthority
    server: Issued
    client: Issued
    stranger: Issued  # a client certificate from a CA the proxy does not trust


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority(directory, "orchestrator")
    return Pki(
        ca=ca,
        server=ca.issue("temporal", server=True, dns_names=(SERVER_NAME,)),
        client=ca.issue("worker", server=False),
        stranger=CertificateAuthority(directory, "elsewhere").issue("worker", server=False),
    )


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    """The dev server and the emulator; the API and the worker are the tests' own."""
    with DevStack(
        tmp_path_factory.mktemp("tls-stack"),
        free_stack_ports(),
        extra_env=E2E_ENV,
        emulator_time_scale=E2E_EMULATOR_TIME_SCALE,
        temporal_ui=False,
        components=("temporal", "emulator"),
    ) as stack:
        yield stack


GRPC_REFUSAL = """
    location @{name} {{
        default_type application/grpc;
        add_header grpc-status 16 always;
        add_header grpc-message "{message}" always;
        return 204;
    }}"""


class GrpcTlsProxy:
    """nginx in one foreground process, its config, logs and temp files under ``directory``."""

    def __init__(self, directory: Path, pki: Pki, upstream: str) -> None:
        assert NGINX.is_file(), f"{NGINX} is missing: `make .venv/.installed` installs nginx"
        self.directory = directory
        (self.port,) = free_ports(1)
        self.address = f"127.0.0.1:{self.port}"
        self.access_log = directory / "access.log"
        d = directory
        config = f"""
daemon off;
master_process off;
error_log {d}/error.log notice;
pid {d}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    log_format grpc '$status $request_uri namespace=$http_temporal_namespace';
    access_log {self.access_log} grpc;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen {self.address} ssl http2;
        ssl_certificate {pki.server.cert};
        ssl_certificate_key {pki.server.key};
        ssl_client_certificate {pki.ca.cert_path};
        ssl_verify_client on;
        # Long polls last up to 70 s; Temporal bounds message sizes itself.
        grpc_read_timeout 120s;
        grpc_send_timeout 120s;
        client_max_body_size 0;
        error_page 495 496 = @no_client_certificate;
        error_page 401 = @no_api_key;
        location / {{
            if ($http_authorization != "Bearer {API_KEY}") {{ return 401; }}
            grpc_pass grpc://{upstream};
        }}
        {GRPC_REFUSAL.format(name="no_client_certificate", message="no valid client certificate")}
        {GRPC_REFUSAL.format(name="no_api_key", message="missing or wrong API key")}
    }}
}}
"""
        (directory / "nginx.conf").write_text(config)
        self.log = (directory / "nginx.out").open("wb")
        self.process = subprocess.Popen(
            [str(NGINX), "-p", str(d), "-c", str(d / "nginx.conf"), "-e", str(d / "error.log")],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        eventually(self._listening, timeout=30, description="nginx to listen")

    def _listening(self) -> bool:
        assert self.process.poll() is None, (self.directory / "error.log").read_text()
        try:
            with httpx.Client(verify=False, timeout=2) as client:  # a probe: is it up
                client.get(f"https://{self.address}/")
        except httpx.TransportError:
            return False
        return True

    def requests(self) -> list[str]:
        return self.access_log.read_text().splitlines() if self.access_log.exists() else []

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.log.close()


@pytest.fixture(scope="module")
def proxy(
    tmp_path_factory: pytest.TempPathFactory, pki: Pki, backend: DevStack
) -> Iterator[GrpcTlsProxy]:
    running = GrpcTlsProxy(tmp_path_factory.mktemp("nginx"), pki, backend.temporal_address)
    yield running
    running.stop()


def credentials(pki: Pki) -> dict[str, str]:
    """Everything a process needs to pass the proxy."""
    return {
        "ORCHESTRATOR_TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pki.ca.cert_path),
        "ORCHESTRATOR_TEMPORAL_TLS_SERVER_NAME": SERVER_NAME,
        "ORCHESTRATOR_TEMPORAL_TLS_CLIENT_CERT_PATH": str(pki.client.cert),
        "ORCHESTRATOR_TEMPORAL_TLS_CLIENT_KEY_PATH": str(pki.client.key),
        "ORCHESTRATOR_TEMPORAL_API_KEY": API_KEY,
    }


class Processes:
    """``orchestrator api`` / ``worker`` processes started by a test, killed after it."""

    def __init__(self, directory: Path, backend: DevStack, proxy: GrpcTlsProxy) -> None:
        self.directory = directory
        (self.api_port,) = free_ports(1)
        self.database = directory / "orchestrator.db"
        self.env = backend.env | {
            "ORCHESTRATOR_TEMPORAL_ADDRESS": proxy.address,  # the proxy, never the server
            "ORCHESTRATOR_DATABASE_URL": f"sqlite:///{self.database}",
            "ORCHESTRATOR_API_PORT": str(self.api_port),
            "ORCHESTRATOR_PUBLIC_URL": f"http://127.0.0.1:{self.api_port}",
            "ORCHESTRATOR_BOOTSTRAP_ADMIN_KEY": backend.api_key,
        }
        self.api_headers = backend.api_headers
        self.running: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, temporal: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (self.directory / f"{name}.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", name],
            env=self.env | temporal,
            cwd=self.directory,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.running[name] = process
        return process

    def output(self, name: str) -> str:
        return (self.directory / f"{name}.log").read_text(errors="replace")

    def refused_at_start(self, name: str, temporal: dict[str, str]) -> str:
        """Start ``name``; it must exit on its own, unsuccessfully. Its output."""
        process = self.start(name, temporal)
        try:
            process.wait(EXIT_BOUND_SECONDS)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name} still running after {EXIT_BOUND_SECONDS}s: {self.output(name)}")
        output = self.output(name)
        # 1 from the worker, uvicorn's 3 ("startup failed") from the API: an exit, no abort.
        assert process.returncode == EXIT_CODES[name], output
        assert "Fatal Python error" not in output
        assert API_KEY not in output
        return output

    def stop(self) -> None:
        for process in self.running.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(10)


@pytest.fixture
def processes(tmp_path: Path, backend: DevStack, proxy: GrpcTlsProxy) -> Iterator[Processes]:
    started = Processes(tmp_path, backend, proxy)
    try:
        yield started
    finally:
        started.stop()


def test_a_request_succeeds_through_the_tls_proxy(
    processes: Processes, proxy: GrpcTlsProxy, pki: Pki
) -> None:
    processes.start("worker", credentials(pki))
    processes.start("api", credentials(pki))
    api_url = f"http://127.0.0.1:{processes.api_port}"

    def healthy() -> bool:
        for name, process in processes.running.items():
            assert process.poll() is None, f"{name} exited: {processes.output(name)}"
        try:
            status: str = httpx.get(f"{api_url}/healthz", timeout=5).json()["status"]
        except httpx.TransportError:
            return False
        return status == "ok"

    eventually(healthy, timeout=90, description="the API to be connected to Temporal")
    request = {
        "workspaceId": "ws_tls",
        "runs": [{"actor": "ultron-generator", "input": {"items": 7, "durationSecs": 1}}],
    }
    with httpx.Client(base_url=api_url, timeout=30, headers=processes.api_headers) as api:
        accepted = api.post("/runs", json=request)
        assert accepted.status_code == 202, accepted.text
        run = wait_terminal(api, accepted.json()["runId"])
    assert run["state"] == "succeeded", run
    assert [c["itemsIngested"] for c in run["children"]] == [7]

    # Both processes went through the proxy, and the SDK named the namespace on each call
    # (Temporal Cloud routes API-key requests by that header).
    seen = proxy.requests()
    for call in ("StartWorkflowExecution", "PollWorkflowTaskQueue", "RespondActivityTaskCompleted"):
        assert f"200 /temporal.api.workflowservice.v1.WorkflowService/{call} namespace=default" in (
            seen
        ), seen[-20:]
    for name in ("api", "worker"):
        output = processes.output(name)
        assert API_KEY not in output
    assert (
        f"connected to Temporal at {proxy.address} (namespace default, TLS, own CA, client "
        f"certificate, server name {SERVER_NAME}, API key)"
    ) in processes.output("worker")

    # `orchestrator mcp` uses the same settings: without the API key it is refused as well
    # (its own key is the admin key the API registered in this database).
    temporal = credentials(pki)
    del temporal["ORCHESTRATOR_TEMPORAL_API_KEY"]
    processes.env["ORCHESTRATOR_API_KEY"] = processes.api_headers["Authorization"].split()[1]
    output = processes.refused_at_start("mcp", temporal)
    assert "refused: the server refused this process's credentials" in output, output


@pytest.mark.parametrize("name", ["worker", "api"])
def test_without_the_ca_the_server_is_not_trusted(
    processes: Processes, pki: Pki, name: str
) -> None:
    temporal = credentials(pki)
    del temporal["ORCHESTRATOR_TEMPORAL_TLS_SERVER_CA_CERT_PATH"]  # system roots only
    output = processes.refused_at_start(name, temporal)
    assert "refused: the server's certificate was not accepted" in output, output
    assert "UnknownIssuer" in output


@pytest.mark.parametrize("name", ["worker", "api"])
def test_a_client_certificate_from_another_ca_is_refused(
    processes: Processes, pki: Pki, name: str
) -> None:
    temporal = credentials(pki) | {
        "ORCHESTRATOR_TEMPORAL_TLS_CLIENT_CERT_PATH": str(pki.stranger.cert),
        "ORCHESTRATOR_TEMPORAL_TLS_CLIENT_KEY_PATH": str(pki.stranger.key),
    }
    output = processes.refused_at_start(name, temporal)
    assert "refused: the server refused this process's credentials" in output, output
    assert "no valid client certificate" in output


@pytest.mark.parametrize("name", ["worker", "api"])
def test_without_the_api_key_the_proxy_refuses(processes: Processes, pki: Pki, name: str) -> None:
    temporal = credentials(pki)
    del temporal["ORCHESTRATOR_TEMPORAL_API_KEY"]
    output = processes.refused_at_start(name, temporal)
    assert "refused: the server refused this process's credentials" in output, output
    assert "missing or wrong API key" in output


def test_a_certificate_without_its_key_stops_the_worker_before_the_database(
    processes: Processes, pki: Pki
) -> None:
    temporal = credentials(pki)
    del temporal["ORCHESTRATOR_TEMPORAL_TLS_CLIENT_KEY_PATH"]
    output = processes.refused_at_start("worker", temporal)
    assert (
        "cannot start the worker: ORCHESTRATOR_TEMPORAL_TLS_CLIENT_KEY_PATH: is required with "
        "ORCHESTRATOR_TEMPORAL_TLS_CLIENT_CERT_PATH"
    ) in output, output
    assert "Traceback" not in output
    assert not processes.database.exists()
