"""Process settings, from environment variables prefixed ``ORCHESTRATOR_`` (or a ``.env`` file).

The defaults describe the local stack started by ``orchestrator dev``: a SQLite file under
``var/``, a Temporal dev server on 127.0.0.1:7233 and the platform emulator on
127.0.0.1:8765. Production overrides them through the environment; see docs/OPERATIONS.md.
The secrets have no default at all: ``orchestrator dev`` generates its own, and a process
started without them refuses to start (``config/safety.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from orchestrator.domain.follow import FollowSettings

DEFAULT_VAR_DIR = Path("var")

#: The settings that are secrets without a default (``Settings.secret`` reads them).
SecretName = Literal["apify_token", "webhook_secret", "callback_secret_key"]


class MissingSecretError(ValueError):
    """A secret setting is unset (and development mode is off); names the variable only."""


class Settings(BaseSettings):
    """Everything a process of the orchestrator needs to know about its surroundings."""

    model_config = SettingsConfigDict(
        env_prefix="ORCHESTRATOR_", env_file=".env", extra="ignore", frozen=True
    )

    database_url: str = Field(
        default=f"sqlite:///{DEFAULT_VAR_DIR / 'orchestrator.db'}",
        description="SQLAlchemy URL of the app database (sqlite:///path or "
        "postgresql+psycopg://user@host/db).",
    )
    temporal_address: str = Field(default="127.0.0.1:7233", description="host:port of Temporal.")
    temporal_namespace: str = Field(default="default", description="Temporal namespace.")
    task_queue: str = Field(
        default="scraper-orchestrator", description="Task queue of the workers' workflows."
    )

    apify_api_url: str = Field(
        default="http://127.0.0.1:8765",
        description="Base URL of the Apify API (the local emulator by default).",
    )
    apify_token: SecretStr | None = Field(
        default=None, description="Apify API token (sent as a bearer). Required by the worker."
    )

    public_url: str = Field(
        default="http://127.0.0.1:8000",
        description="URL at which the platform can reach this API (webhooks point here).",
    )
    webhook_secret: SecretStr | None = Field(
        default=None,
        description="Server secret from which each child's platform-webhook secret is derived. "
        "Required; at least 32 characters.",
    )

    poll_interval_seconds: float = Field(
        default=60.0, gt=0, description="Backstop poll interval when no webhook arrives."
    )
    default_timeout_grace_seconds: float = Field(
        default=600.0, ge=0, description="Added to a child's timeoutSec to form its backstop cap."
    )
    default_cap_seconds: float = Field(
        default=4 * 3600.0, gt=0, description="Backstop cap for a child that gives no timeoutSec."
    )
    dataset_page_size: int = Field(
        default=1000, gt=0, le=100_000, description="Items per dataset page read by an ingest."
    )
    poll_long_wait_seconds: int = Field(
        default=10,
        ge=0,
        le=60,
        description="waitForFinish of an interval poll: a run ending meanwhile answers at once.",
    )
    polls_per_workflow_run: int = Field(
        default=500, gt=0, description="Polls before a poller continues-as-new."
    )
    capacity_retry_seconds: float = Field(
        default=30.0, gt=0, description="Wait before retrying a start refused for capacity (402)."
    )
    platform_start_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="HTTP timeout of a start call; an unanswered start is "
        "looked up on the platform before another is sent.",
    )
    reconcile_interval_seconds: float = Field(
        default=60.0, gt=0, description="How often the drift reconciler runs."
    )
    ingest_heartbeat_seconds: float = Field(
        default=30.0, gt=0, description="An ingest silent this long is retried on another worker."
    )
    usage_settle_seconds: float = Field(
        default=10.0,
        ge=0,
        le=300,
        description="Usage (usageTotalUsd) is preliminary right after a run ends: the first "
        "settling read waits until this long after the platform's finishedAt.",
    )
    usage_settle_interval_seconds: float = Field(
        default=3.0,
        gt=0,
        le=60,
        description="Between settling reads; usage is settled when two reads agree.",
    )
    usage_settle_max_reads: int = Field(
        default=5,
        ge=2,
        le=20,
        description="Settling reads per run at most; the last figure stands after them.",
    )

    actor_registry_file: Path | None = Field(
        default=None,
        description="JSON file seeding the actor registry; the bundled demo registry when unset.",
    )

    api_host: str = Field(default="127.0.0.1", description="Interface the API binds.")
    api_port: int = Field(default=8000, description="Port the API binds.")

    # -- API security and limits (docs/API.md) --------------------------------------------
    bootstrap_admin_key: SecretStr | None = Field(
        default=None,
        description="An admin API key (ork_… format) the API registers on start if absent; "
        "how a fresh deployment (and `orchestrator dev`) gets its first key.",
    )
    callback_secret_key: SecretStr | None = Field(
        default=None,
        description="Server key from which each workspace's callback signing secret is "
        "derived; the same on every API and worker process. Required; at least 32 characters.",
    )
    callback_secret_grace_seconds: float = Field(
        default=24 * 3600.0,
        ge=0,
        description="After a rotation, the previous callback secret also signs for this long.",
    )
    allow_insecure_callback_localhost: bool = Field(
        default=False,
        description="Local development only: accept http://localhost, 127.0.0.1 and [::1] "
        "callback URLs. Never enable in production.",
    )
    max_body_bytes: int = Field(
        default=256 * 1024, gt=0, description="Largest request body accepted (413 above)."
    )
    max_runs_per_request: int = Field(
        default=100, gt=0, le=1000, description="Most actor runs one request may ask for."
    )
    max_input_bytes: int = Field(
        default=64 * 1024, gt=0, description="Largest actor input (compact JSON) per run."
    )
    max_step_input_values: int = Field(
        default=1000,
        gt=0,
        description="Most values a chained run's input field takes from an earlier run's rows "
        "(the default and the hard maximum of an `inputFrom` source's `max`).",
    )
    callback_retry_initial_seconds: float = Field(
        default=5.0,
        gt=0,
        description="First retry delay of a callback; the schedule doubles from it.",
    )
    row_batch_max_rows: int = Field(
        default=1000,
        gt=0,
        le=100_000,
        description="Most rows in one batch pushed to a callback (`deliver.rows=callback`).",
    )
    row_batch_max_bytes: int = Field(
        default=1024 * 1024,
        gt=0,
        description="Most bytes of NDJSON in one pushed batch; a single larger row goes alone.",
    )

    # -- Temporal connection: TLS, mTLS, API key (docs/OPERATIONS.md) --------------------
    # Checked, files read and parsed, before any connection (config/temporal.py).
    temporal_tls: bool | None = Field(
        default=None,
        description="TLS to Temporal. Unset: on when a CA, client certificate, server name or "
        "API key is set, off otherwise; true: on (system roots unless a CA is given); false: "
        "plaintext, refused together with any TLS setting or an API key.",
    )
    temporal_tls_server_ca_cert_path: Path | None = Field(
        default=None,
        description="PEM file of the CA(s) that sign Temporal's server certificate (instead of "
        "the system roots); not with TEMPORAL_TLS_SERVER_CA_CERT_DATA.",
    )
    temporal_tls_server_ca_cert_data: str | None = Field(
        default=None,
        description="The same CA(s) as inline PEM text (literal \\n accepted for line breaks).",
    )
    temporal_tls_client_cert_path: Path | None = Field(
        default=None,
        description="mTLS: PEM file of this process's client certificate (and its chain); "
        "needs TEMPORAL_TLS_CLIENT_KEY_PATH.",
    )
    temporal_tls_client_key_path: Path | None = Field(
        default=None,
        description="mTLS: PEM file of the client certificate's private key (unencrypted).",
    )
    temporal_tls_server_name: str | None = Field(
        default=None,
        description="Server name for SNI and certificate verification, when it differs from "
        "the host of TEMPORAL_ADDRESS.",
    )
    temporal_api_key: SecretStr | None = Field(
        default=None,
        description="API key (Temporal Cloud), sent as `authorization: Bearer <key>`; needs TLS.",
    )
    temporal_connect_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="Bound on one attempt to connect to Temporal (TCP, TLS and the first call).",
    )

    @field_validator(
        "temporal_tls",
        "temporal_tls_server_ca_cert_path",
        "temporal_tls_server_ca_cert_data",
        "temporal_tls_client_cert_path",
        "temporal_tls_client_key_path",
        "temporal_tls_server_name",
        "temporal_api_key",
        mode="before",
    )
    @classmethod
    def _blank_temporal_setting_is_unset(cls, value: object) -> object:
        # `VAR=` (or a blank line in .env) means "not set", as it does for Temporal's own
        # TEMPORAL_* variables; it is also how `orchestrator dev` unsets them for its stack.
        if isinstance(value, str) and not value.strip():
            return None
        return value

    # -- platform rate limits (docs/OPERATIONS.md "Platform rate limits") ------------------
    platform_rate_limit_per_resource: float = Field(
        default=50.0,
        ge=0,
        description="Calls a second this process sends to one platform resource (an actor, "
        "a run, a dataset); Apify allows 60 per resource. With N processes give each a "
        "share (60/N or less). 0 turns it off.",
    )
    platform_rate_limit_run_starts: float = Field(
        default=300.0,
        ge=0,
        description="Run starts a second this process sends for one actor; Apify allows 400. "
        "With N processes give each a share (400/N or less). 0 turns it off.",
    )
    platform_rate_limit_overall: float = Field(
        default=1000.0,
        ge=0,
        description="Platform calls a second this process sends in all; Apify allows a user "
        "250000 a minute (about 4166 a second). With N processes give each a share. "
        "0 turns it off.",
    )
    platform_max_attempts: int = Field(
        default=5,
        ge=1,
        le=20,
        description="Attempts of one platform call on 429, 5xx and network errors (a start "
        "is sent once) before it fails as retryable and the activity's own retry takes over.",
    )
    platform_backoff_initial_seconds: float = Field(
        default=0.5,
        gt=0,
        le=60,
        description="First wait before retrying a platform call without Retry-After; random "
        "in [d, 2d], doubling each retry (Apify's documented backoff from 500 ms).",
    )
    platform_retry_after_max_seconds: float = Field(
        default=10.0,
        ge=0,
        le=300,
        description="Longest Retry-After of a 429 waited for in process; a longer one fails "
        "the call at once and the activity retries after the Retry-After instead.",
    )

    # -- secrets and development mode (docs/OPERATIONS.md "Secrets") ---------------------
    insecure_dev_mode: bool = Field(
        default=False,
        description="Never in production: lets `api` and `worker` start without secrets (the "
        "public development values stand in) and with unsafe settings, warning of each.",
    )

    #: What stands in for an unset secret in development mode. Public (they are in this
    #: file), so ``config/safety.py`` refuses them outside development mode.
    DEVELOPMENT_SECRETS: ClassVar[Mapping[str, str]] = MappingProxyType(
        {
            "apify_token": "emulator-token",  # what the platform emulator accepts by default
            "webhook_secret": "local-development-webhook-secret",
            "callback_secret_key": "local-development-callback-secret-key",
        }
    )

    def secret(self, name: SecretName) -> str:
        """The value of secret setting ``name``; in development mode the public development
        value when it is unset. Raises :class:`MissingSecretError` naming the variable."""
        value: SecretStr | None = getattr(self, name)
        if value is not None and value.get_secret_value():  # an empty variable is unset
            return value.get_secret_value()
        if self.insecure_dev_mode:
            return self.DEVELOPMENT_SECRETS[name]
        raise MissingSecretError(f"ORCHESTRATOR_{name.upper()} is not set")

    # -- metrics and traces (docs/OPERATIONS.md "Metrics and traces") ---------------------
    metrics_require_key: bool = Field(
        default=True,
        description="The API's GET /metrics needs an admin API key (Prometheus: "
        "`authorization` credentials); false only where the API port is internal.",
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        description="Interface the worker's metrics endpoint and the Temporal SDK's "
        "metrics endpoint bind.",
    )
    worker_metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Port of the worker's /metrics (its activities' counters); unset or 0: off.",
    )
    temporal_metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Port on which this process's Temporal SDK serves its own metrics "
        "(temporal_*); unset or 0: off.",
    )
    metrics_db_refresh_seconds: float = Field(
        default=5.0,
        ge=0,
        description="The database-derived gauges (requests and children by state) are "
        "read at most this often; scrapes in between get the last figures.",
    )
    tracing_enabled: bool = Field(
        default=False,
        description="OpenTelemetry traces through Temporal's TracingInterceptor, exported "
        "over OTLP/HTTP as the standard OTEL_* variables say.",
    )

    # -- capacity and admission (docs/ARCHITECTURE.md "Capacity and admission") ----------
    account_limits_refresh_seconds: float = Field(
        default=60.0,
        gt=0,
        description="How often the admission workflow reads the account's limits and use "
        "from the platform (and runs its leak guard).",
    )
    account_max_concurrent_runs: int | None = Field(
        default=None,
        ge=0,
        description="Concurrent platform runs the account allows; None: as the platform says.",
    )
    account_max_memory_mbytes: int | None = Field(
        default=None,
        ge=0,
        description="Memory (MB) of all runs the account allows; None: as the platform says.",
    )
    admission_default_memory_mb: int = Field(
        default=1024,
        gt=0,
        description="Memory a child is admitted with when neither its options nor its "
        "catalog entry give one.",
    )

    def follow_settings(self) -> FollowSettings:
        """The knobs that decide how every started child is followed (domain/follow.py)."""
        return FollowSettings(
            poll_interval_seconds=self.poll_interval_seconds,
            poll_long_wait_seconds=self.poll_long_wait_seconds,
            polls_per_workflow_run=self.polls_per_workflow_run,
            ingest_heartbeat_seconds=self.ingest_heartbeat_seconds,
            timeout_grace_seconds=self.default_timeout_grace_seconds,
            default_cap_seconds=self.default_cap_seconds,
        )
