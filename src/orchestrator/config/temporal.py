"""Connection to the Temporal service: plaintext to the dev server; TLS, mTLS and API keys to
a real deployment — all through the SDK's own options (``TLSConfig``, ``api_key``).

Trade-off: every process checks its connection settings *before* it connects, by reading
the files and parsing them with the standard library's ``ssl`` (the same PEM the SDK's
rustls reads). A wrong path, a certificate without its key, a key that does not match its
certificate, malformed PEM or an API key that would travel in clear text is a start-up
error naming the ``ORCHESTRATOR_*`` setting — the SDK alone would silently ignore an
unparsable CA (and then reject the server as "UnknownIssuer") or fail with a Rust message
naming no setting. A server that refuses us (certificate, credentials) is a start-up
error too, never retried; only "cannot reach it yet" is worth waiting for. The SDK reports
both as a bare ``RuntimeError`` whose text is all there is to tell them apart
(:func:`classify_connect_failure`); an unknown text counts as unreachable, which callers
retry a bounded number of times.

Secrets: the API key is held as ``SecretStr`` until the SDK call and never appears in an
error, a log line or :meth:`TemporalConnection.describe`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from enum import Enum
from pathlib import Path
from typing import NoReturn

from temporalio.client import Client, Interceptor
from temporalio.runtime import Runtime
from temporalio.service import TLSConfig

from orchestrator.config.settings import Settings

log = logging.getLogger(__name__)

#: No PEM file of ours is anywhere near this; a larger file is the wrong file.
MAX_PEM_BYTES = 1024 * 1024


def env_name(field_name: str) -> str:
    """The environment variable an operator sets for a settings field."""
    return f"ORCHESTRATOR_{field_name.upper()}"


class TemporalSetupError(Exception):
    """This process cannot work with Temporal as configured; the message says why."""


class TemporalConfigError(TemporalSetupError, ValueError):
    """A connection setting is wrong or missing; refused before connecting."""

    def __init__(self, field_name: str, problem: str) -> None:
        self.setting = env_name(field_name)
        super().__init__(f"{self.setting}: {problem}")


class TemporalRefused(TemporalSetupError):
    """Temporal (or a proxy in front of it) refused this process's TLS or credentials.

    Retrying cannot help until the settings change.
    """


class TemporalUnavailable(TemporalSetupError, RuntimeError):
    """Temporal did not answer (not started yet, network); worth retrying a few times."""


@dataclass(frozen=True)
class TemporalConnection:
    """Validated connection settings, ready for ``Client.connect``."""

    target: str
    namespace: str
    tls: TLSConfig | bool
    api_key: str | None = field(repr=False)
    connect_timeout: timedelta

    def describe(self) -> str:
        """Where and how we connect, for logs and errors (never the key or key material)."""
        if self.tls is False:
            security = "plaintext"
        else:
            parts = ["TLS"]
            if isinstance(self.tls, TLSConfig):
                if self.tls.server_root_ca_cert is not None:
                    parts.append("own CA")
                if self.tls.client_cert is not None:
                    parts.append("client certificate")
                if self.tls.domain is not None:
                    parts.append(f"server name {self.tls.domain}")
            security = ", ".join(parts)
        key = ", API key" if self.api_key is not None else ""
        return f"{self.target} (namespace {self.namespace}, {security}{key})"


# -- validation (reads files, connects to nothing) -----------------------------------------


def _fail(field_name: str, problem: str) -> NoReturn:
    raise TemporalConfigError(field_name, problem)


def _read(field_name: str, path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_PEM_BYTES + 1)
    except OSError as exc:
        _fail(field_name, f"cannot read {path}: {exc.strerror or exc}")
    if len(data) > MAX_PEM_BYTES:
        _fail(field_name, f"{path} is larger than {MAX_PEM_BYTES} bytes; not a PEM file")
    return data


def _check_ca(field_name: str, pem: bytes, origin: str) -> None:
    try:
        text = pem.decode("ascii")
    except UnicodeDecodeError:
        _fail(field_name, f"{origin} is not PEM text (a DER file? convert it with openssl x509)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cadata=text)
    except (ssl.SSLError, ValueError) as exc:
        _fail(field_name, f"{origin} holds no valid PEM certificate ({exc.args[-1]})")


def _refuse_password() -> bytes:
    raise _EncryptedKey


class _EncryptedKey(Exception):
    pass


def _check_client_pair(cert_path: Path, key_path: Path) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_cert_chain(cert_path, key_path, password=_refuse_password)
    except _EncryptedKey:
        _fail(
            "temporal_tls_client_key_path",
            f"{key_path} is encrypted; the SDK needs an unencrypted key "
            "(keep it readable by this process only)",
        )
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            _fail(
                "temporal_tls_client_key_path",
                f"{key_path} is not the private key of {cert_path}",
            )
        # Which of the two is malformed: the certificate alone tells.
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=cert_path)
        except ssl.SSLError:
            _fail("temporal_tls_client_cert_path", f"{cert_path} holds no valid PEM certificate")
        _fail("temporal_tls_client_key_path", f"{key_path} holds no valid PEM private key")


def _check_target(address: str) -> None:
    host, sep, port = address.rpartition(":")
    if "://" in address or not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        _fail("temporal_address", f"{address!r} is not host:port (no scheme), e.g. 127.0.0.1:7233")


def _check_server_name(name: str) -> str:
    name = name.strip()
    if any(c.isspace() for c in name) or "/" in name or ":" in name:
        _fail("temporal_tls_server_name", f"{name!r} is not a host name")
    return name


def _check_api_key(key: str) -> str:
    key = key.strip()
    # It becomes an HTTP/2 header value: printable ASCII, nothing that could split it.
    if not all(" " <= c <= "~" for c in key):
        _fail("temporal_api_key", "contains characters that cannot go in a header (a newline?)")
    return key


def build_tls_config(settings: Settings) -> TLSConfig | bool:
    """The SDK's ``tls`` argument for these settings: ``False`` (plaintext), ``True`` (system
    roots, nothing else to say) or a checked :class:`TLSConfig`."""
    ca_path = settings.temporal_tls_server_ca_cert_path
    ca_data = settings.temporal_tls_server_ca_cert_data
    cert_path = settings.temporal_tls_client_cert_path
    key_path = settings.temporal_tls_client_key_path
    server_name = settings.temporal_tls_server_name
    given = {
        name: value is not None
        for name, value in (
            ("temporal_tls_server_ca_cert_path", ca_path),
            ("temporal_tls_server_ca_cert_data", ca_data),
            ("temporal_tls_client_cert_path", cert_path),
            ("temporal_tls_client_key_path", key_path),
            ("temporal_tls_server_name", server_name),
        )
    }
    if settings.temporal_tls is False:
        for name, is_set in given.items():
            if is_set:
                _fail(name, f"is set but {env_name('temporal_tls')} is false")
        if settings.temporal_api_key is not None:
            _fail(
                "temporal_api_key",
                f"would be sent in clear text: {env_name('temporal_tls')} is false",
            )
        return False
    if settings.temporal_tls is None and not any(given.values()):
        # The SDK's rule too: an API key alone means TLS with the system roots.
        return settings.temporal_api_key is not None
    if ca_path is not None and ca_data is not None:
        _fail("temporal_tls_server_ca_cert_data", "set either it or the _PATH one, not both")
    if (cert_path is None) != (key_path is None):
        missing = (
            "temporal_tls_client_key_path" if key_path is None else "temporal_tls_client_cert_path"
        )
        present = (
            "temporal_tls_client_cert_path" if key_path is None else "temporal_tls_client_key_path"
        )
        _fail(missing, f"is required with {env_name(present)} (mTLS needs both)")

    root_ca: bytes | None = None
    if ca_path is not None:
        root_ca = _read("temporal_tls_server_ca_cert_path", ca_path)
        _check_ca("temporal_tls_server_ca_cert_path", root_ca, str(ca_path))
    elif ca_data is not None:
        text = ca_data.strip()
        if "\n" not in text:  # an environment variable with the line breaks escaped
            text = text.replace("\\n", "\n")
        root_ca = (text + "\n").encode("ascii", errors="replace")
        _check_ca("temporal_tls_server_ca_cert_data", root_ca, "the value")
    client_cert: bytes | None = None
    client_key: bytes | None = None
    if cert_path is not None and key_path is not None:
        client_cert = _read("temporal_tls_client_cert_path", cert_path)
        client_key = _read("temporal_tls_client_key_path", key_path)
        _check_client_pair(cert_path, key_path)
    return TLSConfig(
        server_root_ca_cert=root_ca,
        domain=_check_server_name(server_name) if server_name is not None else None,
        client_cert=client_cert,
        client_private_key=client_key,
    )


def temporal_connection(settings: Settings) -> TemporalConnection:
    """Check the connection settings and build what ``Client.connect`` needs.

    Raises :class:`TemporalConfigError` naming the first wrong setting.
    """
    _check_target(settings.temporal_address)
    namespace = settings.temporal_namespace.strip()
    if not namespace:
        _fail("temporal_namespace", "is empty")
    tls = build_tls_config(settings)
    key = settings.temporal_api_key
    return TemporalConnection(
        target=settings.temporal_address,
        namespace=namespace,
        tls=tls,
        api_key=_check_api_key(key.get_secret_value()) if key is not None else None,
        connect_timeout=timedelta(seconds=settings.temporal_connect_timeout_seconds),
    )


# -- connecting ------------------------------------------------------------------------------


class ConnectFailure(Enum):
    """What a failed ``Client.connect`` means for the process."""

    UNREACHABLE = "unreachable"  # may be transient: retry a bounded number of times
    SERVER_CERTIFICATE = "server_certificate"
    NOT_TLS = "not_tls"
    CREDENTIALS = "credentials"
    CLIENT_KEY = "client_key"


# Fragments of the SDK core's (tonic/rustls) error text. Only these mean "refused".
_REFUSALS: tuple[tuple[str, ConnectFailure], ...] = (
    ("InvalidCertificate", ConnectFailure.SERVER_CERTIFICATE),
    ("InvalidContentType", ConnectFailure.NOT_TLS),
    ("CorruptMessage", ConnectFailure.NOT_TLS),
    ("code: Unauthenticated", ConnectFailure.CREDENTIALS),
    ("code: PermissionDenied", ConnectFailure.CREDENTIALS),
    ("AlertReceived", ConnectFailure.CREDENTIALS),  # the server's TLS stack refused our cert
    ("PrivateKeyParseError", ConnectFailure.CLIENT_KEY),
)

_HINTS = {
    ConnectFailure.SERVER_CERTIFICATE: "the server's certificate was not accepted; check "
    f"{env_name('temporal_tls_server_ca_cert_path')} (or _DATA) and "
    f"{env_name('temporal_tls_server_name')}",
    ConnectFailure.NOT_TLS: f"the server does not speak TLS; check {env_name('temporal_tls')} "
    f"and {env_name('temporal_address')}",
    ConnectFailure.CREDENTIALS: "the server refused this process's credentials; check "
    f"{env_name('temporal_api_key')}, {env_name('temporal_tls_client_cert_path')} / "
    f"{env_name('temporal_tls_client_key_path')} and {env_name('temporal_namespace')}",
    ConnectFailure.CLIENT_KEY: "the SDK cannot use the client key; check "
    f"{env_name('temporal_tls_client_key_path')}",
}


def classify_connect_failure(message: str) -> ConnectFailure:
    """What the SDK's connect error text means (it raises a bare ``RuntimeError``)."""
    for fragment, failure in _REFUSALS:
        if fragment in message:
            return failure
    return ConnectFailure.UNREACHABLE


async def connect_temporal(
    settings: Settings,
    *,
    runtime: Runtime | None = None,
    interceptors: Sequence[Interceptor] = (),
) -> Client:
    """A client for the configured Temporal, or a :class:`TemporalSetupError` that says why not.

    One attempt, bounded by ``TEMPORAL_CONNECT_TIMEOUT_SECONDS``. ``runtime``: the process's
    Temporal runtime (``observability.exposition.temporal_runtime``, the SDK's metrics);
    ``interceptors``: tracing (``observability.tracing``). Both built once per process by its
    composition root.
    """
    connection = temporal_connection(settings)
    where = connection.describe()
    seconds = connection.connect_timeout.total_seconds()
    try:
        async with asyncio.timeout(seconds):
            client = await Client.connect(
                connection.target,
                namespace=connection.namespace,
                tls=connection.tls,
                api_key=connection.api_key,
                connect_timeout=connection.connect_timeout,
                runtime=runtime,
                interceptors=interceptors,
            )
    except TimeoutError:
        raise TemporalUnavailable(
            f"Temporal at {where} did not answer within {seconds:g}s"
        ) from None
    except RuntimeError as exc:
        reason = str(exc)
        failure = classify_connect_failure(reason)
        if failure is ConnectFailure.UNREACHABLE:
            raise TemporalUnavailable(f"Temporal at {where} is not reachable: {reason}") from None
        raise TemporalRefused(
            f"Temporal at {where} refused: {_HINTS[failure]} ({reason})"
        ) from None
    log.info("connected to Temporal at %s", where)
    return client
