"""Temporal connection settings (issue 16): what reaches ``Client.connect``, and every wrong
or missing piece of TLS material refused before connecting, naming its setting."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from bench.stack import free_ports
from cryptography.hazmat.primitives import serialization
from pydantic import SecretStr
from temporalio.service import TLSConfig

from orchestrator.cli.devstack import DevStack
from orchestrator.config.settings import Settings
from orchestrator.config.temporal import (
    ConnectFailure,
    TemporalConfigError,
    TemporalUnavailable,
    classify_connect_failure,
    connect_temporal,
    temporal_connection,
)
from tests.support.tls import CertificateAuthority, Issued

KEY = "tmprl-secret-key-0123456789"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority(directory, "good")
    other = CertificateAuthority(directory, "other")
    return {
        "ca": ca,
        "client": ca.issue("worker", server=False),
        "other": other.issue("w", server=False),
    }


def settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)


def refused(setting: str, **values: Any) -> str:
    with pytest.raises(TemporalConfigError) as caught:
        temporal_connection(settings(**values))
    assert caught.value.setting == setting, str(caught.value)
    assert str(caught.value).startswith(f"{setting}: ")
    return str(caught.value)


def test_the_default_is_plaintext_to_the_dev_server() -> None:
    connection = temporal_connection(settings())
    assert (connection.target, connection.namespace) == ("127.0.0.1:7233", "default")
    assert connection.tls is False
    assert connection.api_key is None
    assert connection.describe() == "127.0.0.1:7233 (namespace default, plaintext)"


def test_an_api_key_alone_means_tls_with_the_system_roots_and_is_never_shown() -> None:
    connection = temporal_connection(
        settings(
            temporal_address="eu-west-1.aws.api.temporal.io:7233",
            temporal_namespace="orchestrator.a1b2c",
            temporal_api_key=SecretStr(f"  {KEY}\n"),
        )
    )
    assert connection.tls is True
    assert connection.api_key == KEY  # stripped: a trailing newline from a secret file
    assert KEY not in repr(connection)
    assert KEY not in connection.describe()
    assert connection.describe().endswith("TLS, API key)")


def test_mtls_with_its_own_ca_and_server_name(pki: dict[str, Any]) -> None:
    ca: CertificateAuthority = pki["ca"]
    client: Issued = pki["client"]
    connection = temporal_connection(
        settings(
            temporal_tls_server_ca_cert_path=ca.cert_path,
            temporal_tls_client_cert_path=client.cert,
            temporal_tls_client_key_path=client.key,
            temporal_tls_server_name="temporal.internal",
        )
    )
    assert connection.tls == TLSConfig(
        server_root_ca_cert=ca.pem,
        domain="temporal.internal",
        client_cert=client.cert.read_bytes(),
        client_private_key=client.key.read_bytes(),
    )
    description = connection.describe()
    assert "own CA, client certificate, server name temporal.internal" in description
    assert "PRIVATE KEY" not in description


def test_inline_ca_pem_with_escaped_line_breaks(pki: dict[str, Any]) -> None:
    ca: CertificateAuthority = pki["ca"]
    escaped = ca.pem.decode().strip().replace("\n", "\\n")
    connection = temporal_connection(settings(temporal_tls_server_ca_cert_data=escaped))
    assert isinstance(connection.tls, TLSConfig)
    assert connection.tls.server_root_ca_cert == ca.pem


def test_tls_switched_on_explicitly_without_material_uses_the_system_roots() -> None:
    connection = temporal_connection(settings(temporal_tls=True))
    assert connection.tls == TLSConfig()


def test_an_api_key_is_never_sent_in_clear_text() -> None:
    message = refused(
        "ORCHESTRATOR_TEMPORAL_API_KEY", temporal_tls=False, temporal_api_key=SecretStr(KEY)
    )
    assert "clear text" in message
    assert KEY not in message


def test_tls_material_with_tls_switched_off(pki: dict[str, Any]) -> None:
    refused(
        "ORCHESTRATOR_TEMPORAL_TLS_SERVER_CA_CERT_PATH",
        temporal_tls=False,
        temporal_tls_server_ca_cert_path=pki["ca"].cert_path,
    )


def test_an_unreadable_ca_file_names_its_setting_and_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    message = refused("ORCHESTRATOR_TEMPORAL_TLS_SERVER_CA_CERT_PATH", **ca_path(missing))
    assert str(missing) in message
    refused("ORCHESTRATOR_TEMPORAL_TLS_SERVER_CA_CERT_PATH", **ca_path(tmp_path))  # a directory


def ca_path(path: Path) -> dict[str, Any]:
    return {"temporal_tls_server_ca_cert_path": path}


def test_a_ca_file_without_a_certificate(tmp_path: Path, pki: dict[str, Any]) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    refused("ORCHESTRATOR_TEMPORAL_TLS_SERVER_CA_CERT_PATH", **ca_path(garbage))
    # A key where the CA should be (a common mix-up).
    refused("ORCHESTRATOR_TEMPORAL_TLS_SERVER_CA_CERT_PATH", **ca_path(pki["client"].key))
    truncated = tmp_path / "truncated.pem"
    truncated.write_bytes(pki["ca"].pem[:-60])
    refused("ORCHESTRATOR_TEMPORAL_TLS_SERVER_CA_CERT_PATH", **ca_path(truncated))
    der = tmp_path / "ca.der"
    der.write_bytes(b"\x30\x82\x01\x0a\xff\xfe")
    assert "DER" in refused("ORCHESTRATOR_TEMPORAL_TLS_SERVER_CA_CERT_PATH", **ca_path(der))
    refused("ORCHESTRATOR_TEMPORAL_TLS_SERVER_CA_CERT_DATA", temporal_tls_server_ca_cert_data="x")


def test_the_ca_as_a_file_or_as_text_not_both(pki: dict[str, Any]) -> None:
    refused(
        "ORCHESTRATOR_TEMPORAL_TLS_SERVER_CA_CERT_DATA",
        temporal_tls_server_ca_cert_path=pki["ca"].cert_path,
        temporal_tls_server_ca_cert_data=pki["ca"].pem.decode(),
    )


def test_a_client_certificate_needs_its_key_and_the_other_way_round(pki: dict[str, Any]) -> None:
    client: Issued = pki["client"]
    refused("ORCHESTRATOR_TEMPORAL_TLS_CLIENT_KEY_PATH", temporal_tls_client_cert_path=client.cert)
    refused("ORCHESTRATOR_TEMPORAL_TLS_CLIENT_CERT_PATH", temporal_tls_client_key_path=client.key)


def test_a_key_that_is_not_the_certificates(pki: dict[str, Any]) -> None:
    message = refused(
        "ORCHESTRATOR_TEMPORAL_TLS_CLIENT_KEY_PATH",
        temporal_tls_client_cert_path=pki["client"].cert,
        temporal_tls_client_key_path=pki["other"].key,
    )
    assert "is not the private key of" in message


def test_malformed_client_certificate_or_key(tmp_path: Path, pki: dict[str, Any]) -> None:
    client: Issued = pki["client"]
    junk = tmp_path / "junk.pem"
    junk.write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    refused(
        "ORCHESTRATOR_TEMPORAL_TLS_CLIENT_CERT_PATH",
        temporal_tls_client_cert_path=junk,
        temporal_tls_client_key_path=client.key,
    )
    refused(
        "ORCHESTRATOR_TEMPORAL_TLS_CLIENT_KEY_PATH",
        temporal_tls_client_cert_path=client.cert,
        temporal_tls_client_key_path=junk,
    )
    refused(
        "ORCHESTRATOR_TEMPORAL_TLS_CLIENT_CERT_PATH",
        temporal_tls_client_cert_path=tmp_path / "missing.crt",
        temporal_tls_client_key_path=client.key,
    )


def test_an_encrypted_key_is_refused_without_prompting(tmp_path: Path, pki: dict[str, Any]) -> None:
    client: Issued = pki["client"]
    key = serialization.load_pem_private_key(client.key.read_bytes(), None)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    message = refused(
        "ORCHESTRATOR_TEMPORAL_TLS_CLIENT_KEY_PATH",
        temporal_tls_client_cert_path=client.cert,
        temporal_tls_client_key_path=encrypted,
    )
    assert "encrypted" in message


@pytest.mark.parametrize("address", ["https://temporal.example:7233", "temporal", ":7233", "h:x"])
def test_the_address_is_host_and_port(address: str) -> None:
    refused("ORCHESTRATOR_TEMPORAL_ADDRESS", temporal_address=address)


def test_other_malformed_values() -> None:
    refused("ORCHESTRATOR_TEMPORAL_NAMESPACE", temporal_namespace="  ")
    refused("ORCHESTRATOR_TEMPORAL_TLS_SERVER_NAME", temporal_tls_server_name="a host")
    message = refused("ORCHESTRATOR_TEMPORAL_API_KEY", temporal_api_key=SecretStr("abc\ndef"))
    assert "abc" not in message


def test_a_blank_variable_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("TLS", "TLS_SERVER_CA_CERT_PATH", "TLS_SERVER_NAME", "API_KEY"):
        monkeypatch.setenv(f"ORCHESTRATOR_TEMPORAL_{variable}", "")
    assert temporal_connection(settings()).tls is False


def test_the_local_stack_never_inherits_a_remote_clusters_credentials(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ORCHESTRATOR_TEMPORAL_API_KEY", KEY)
    monkeypatch.setenv("ORCHESTRATOR_TEMPORAL_TLS", "true")
    for name in ("api", "worker"):
        env = DevStack(tmp_path).child_env(name)
        assert env["ORCHESTRATOR_TEMPORAL_API_KEY"] == ""
        assert env["ORCHESTRATOR_TEMPORAL_TLS"] == ""


# Texts of the SDK's RuntimeError, as measured against nginx and the dev server.
SDK_ERRORS = {
    "Failed client connect: Server connection error: tonic::transport::Error(Transport, "
    "ConnectError(Custom { kind: InvalidData, error: InvalidCertificate(UnknownIssuer) }))": (
        ConnectFailure.SERVER_CERTIFICATE
    ),
    "Failed client connect: Server connection error: tonic::transport::Error(Transport, "
    "ConnectError(Custom { kind: InvalidData, error: InvalidCertificate(NotValidForNameContext "
    '{ expected: IpAddress(V4(Ipv4Addr([127, 0, 0, 1]))), presented: ["DnsName(\\"t\\")"] }) }))': (
        ConnectFailure.SERVER_CERTIFICATE
    ),
    "Failed client connect: Server connection error: tonic::transport::Error(Transport, "
    "ConnectError(Custom { kind: InvalidData, error: InvalidMessage(InvalidContentType) }))": (
        ConnectFailure.NOT_TLS
    ),
    "Failed client connect: `get_system_info` call error after connection: Status { code: "
    'Unauthenticated, message: "missing or wrong API key", metadata: MetadataMap { } }': (
        ConnectFailure.CREDENTIALS
    ),
    "Failed client connect: Server connection error: tonic::transport::Error(Transport, "
    "PrivateKeyParseError)": ConnectFailure.CLIENT_KEY,
    "Failed client connect: Server connection error: tonic::transport::Error(Transport, "
    'ConnectError(ConnectError("tcp connect error", 127.0.0.1:40495, Os { code: 111, kind: '
    'ConnectionRefused, message: "Connection refused" })))': ConnectFailure.UNREACHABLE,
    "Failed client connect: `get_system_info` call error after connection: Status { code: "
    'Unavailable, message: "upstream connect error" }': ConnectFailure.UNREACHABLE,
}


@pytest.mark.parametrize("message", list(SDK_ERRORS))
def test_what_a_connect_failure_means(message: str) -> None:
    assert classify_connect_failure(message) is SDK_ERRORS[message]


async def test_nothing_listening_is_unavailable_not_a_hang() -> None:
    (port,) = free_ports(1)  # a port nobody listens on
    with pytest.raises(TemporalUnavailable) as caught:
        await connect_temporal(
            settings(temporal_address=f"127.0.0.1:{port}", temporal_connect_timeout_seconds=5)
        )
    assert f"127.0.0.1:{port} (namespace default, plaintext) is not reachable" in str(caught.value)


async def test_a_server_that_never_answers_is_unavailable_not_a_hang() -> None:
    with socket.socket() as sock:  # accepts TCP (the backlog) but never says a word
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        port = sock.getsockname()[1]
        with pytest.raises(TemporalUnavailable) as caught:
            await connect_temporal(
                settings(
                    temporal_address=f"127.0.0.1:{port}",
                    temporal_api_key=SecretStr(KEY),
                    temporal_connect_timeout_seconds=1,
                )
            )
    assert str(caught.value) == (
        f"Temporal at 127.0.0.1:{port} (namespace default, TLS, API key) did not answer within 1s"
    )
