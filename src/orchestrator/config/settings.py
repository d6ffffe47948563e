"""Process settings, from environment variables prefixed ``ORCHESTRATOR_`` (or a ``.env`` file).

The defaults describe the local stack started by ``orchestrator dev``: a SQLite file under
``var/``, a Temporal dev server on 127.0.0.1:7233 and the platform emulator on
127.0.0.1:8765. Production overrides them through the environment; see docs/OPERATIONS.md.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from orchestrator.domain.follow import FollowSettings

DEFAULT_VAR_DIR = Path("var")


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
    apify_token: SecretStr = Field(
        default=SecretStr("emulator-token"), description="Apify API token (sent as a bearer)."
    )

    public_url: str = Field(
        default="http://127.0.0.1:8000",
        description="URL at which the platform can reach this API (webhooks point here).",
    )
    webhook_secret: SecretStr = Field(
        default=SecretStr("local-development-webhook-secret"),
        description="Server secret from which each child's platform-webhook secret is derived.",
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
    callback_secret_key: SecretStr = Field(
        default=SecretStr("local-development-callback-secret-key"),
        description="Server key from which each workspace's callback signing secret is "
        "derived; the same on every API and worker process.",
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
