"""SQLAlchemy Core tables of the app database (no ORM).

The tables mirror DESIGN.md's data model; the Alembic migrations in ``migrations/`` create
exactly these tables, and ``tests/unit/test_storage.py`` checks that they agree.
Item payloads are stored as JSON text rather than ``jsonb``: rows are written far more
often than they are queried inside the database, and text is the faster bulk path on both
engines.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

# SQLite only auto-increments INTEGER PRIMARY KEY; PostgreSQL gets a BIGINT identity.
BigId = BigInteger().with_variant(Integer(), "sqlite")

scrape_runs = Table(
    "scrape_runs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(128), nullable=False),
    Column("conversation_id", String(128)),
    Column("skill_run_id", String(128)),
    Column("callback_url", Text),
    Column("state", String(16), nullable=False),
    Column("aborted", Integer, nullable=False, default=0),
    # 0007: children that did not succeed still have their rows ingested (issue 11).
    Column("keep_partial_rows", Integer, nullable=False, default=1, server_default="1"),
    Column("children_total", Integer, nullable=False),
    Column("children_succeeded", Integer, nullable=False, default=0),
    Column("children_failed", Integer, nullable=False, default=0),
    Column("items_total", BigInteger, nullable=False, default=0),
    Column("idempotency_key", String(255)),
    Column("request_hash", String(64)),
    Column("budget_usd", Float),
    # 0010: why the request was stopped (``budget-exhausted``), and how it was said.
    Column("stop_reason", String(32)),
    Column("stop_message", Text),
    # 0014: the plan the request was made from (POST /plans, or a brief in POST /runs).
    Column("plan_id", String(64)),
    # 0011: the actor catalog version the request was validated against (null before it).
    Column("catalog_version", Integer),
    # 0013: ``callback`` pushes each child's rows to the callback URL in batches.
    Column("deliver_rows", String(16), nullable=False, default="none", server_default="none"),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    UniqueConstraint("workspace_id", "idempotency_key", name="uq_scrape_runs_idempotency"),
    Index("ix_scrape_runs_workspace_created", "workspace_id", "created_at"),
    Index("ix_scrape_runs_state", "state"),
)

scrape_children = Table(
    "scrape_children",
    metadata,
    Column("id", String(96), primary_key=True),
    Column("run_id", String(64), ForeignKey("scrape_runs.id"), nullable=False),
    Column("idx", Integer, nullable=False),
    Column("actor", String(128), nullable=False),
    Column("platform_actor_id", String(256), nullable=False),
    Column("input_json", Text, nullable=False),
    Column("options_json", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("platform_run_id", String(64)),
    Column("dataset_id", String(64)),
    Column("platform_status", String(32)),
    Column("status_message", Text),
    Column("items_ingested", BigInteger, nullable=False, default=0),
    Column("ingest_offset", BigInteger, nullable=False, default=0),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("started_at", DateTime(timezone=True)),
    Column("finished_at", DateTime(timezone=True)),
    # Spend (0008): the platform's usageTotalUsd and charged events, highest seen; settled
    # once two reads after the finish agreed (only then final).
    Column("usage_total_usd", Float),
    Column("charged_events_json", Text),
    Column("usage_settled_at", DateTime(timezone=True)),
    # Chained runs (0012): the sources of input fields built from earlier runs' rows
    # (domain.chaining.StepSource by field name; null: not chained), and once built, how
    # many values each field got and when (input_json then holds the completed input).
    Column("input_from_json", Text),
    Column("input_built_json", Text),
    Column("input_built_at", DateTime(timezone=True)),
    UniqueConstraint("run_id", "idx", name="uq_scrape_children_run_idx"),
    Index("ix_scrape_children_platform_run_id", "platform_run_id"),
)

scrape_items = Table(
    "scrape_items",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("run_id", String(64), nullable=False),
    Column("child_id", String(96), nullable=False),
    Column("item_index", BigInteger, nullable=False),
    Column("workspace_id", String(128), nullable=False),
    Column("skill_run_id", String(128)),
    Column("conversation_id", String(128)),
    Column("actor", String(128), nullable=False),
    Column("data", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # Rows are read per child (this index); nothing reads them by request (0016).
    UniqueConstraint("child_id", "item_index", name="uq_scrape_items_child_index"),
)

scrape_events = Table(
    "scrape_events",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("run_id", String(64), nullable=False),
    Column("child_id", String(96)),
    Column("kind", String(64), nullable=False),
    Column("message", Text, nullable=False),
    Column("data_json", Text),
    # Set for events that must be recorded once only (transitions, webhook dispatches).
    Column("dedupe_key", String(255), unique=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_scrape_events_run_id", "run_id", "id"),
)

shared_config = Table(
    "shared_config",
    metadata,
    Column("key", String(255), primary_key=True),
    Column("value_json", Text, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# API keys (0005): only a hash of each key is stored; workspace_id NULL is an admin key.
api_keys = Table(
    "api_keys",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("key_hash", String(64), nullable=False),
    Column("workspace_id", String(128)),
    Column("name", String(128), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("revoked_at", DateTime(timezone=True)),
    Column("last_used_at", DateTime(timezone=True)),
    Index("ix_api_keys_workspace_id", "workspace_id"),
)

# Workspaces (0006): the nonces from which each callback signing secret is derived.
workspaces = Table(
    "workspaces",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("secret_nonce", String(64), nullable=False),
    Column("previous_secret_nonce", String(64)),
    Column("previous_secret_expires_at", DateTime(timezone=True)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("secret_rotated_at", DateTime(timezone=True), nullable=False),
    # 0010: the workspace's spending limit per budget_period (day or month); null: none.
    Column("budget_usd", Float),
    Column("budget_period", String(8)),
    # 0015: most platform runs the workspace may hold at once (admission); null: no limit.
    Column("max_concurrent_runs", Integer),
)


plans = Table(
    "plans",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(128), nullable=False),
    Column("catalog_version", Integer, nullable=False),
    Column("strategy", String(32), nullable=False),
    # What the caller asked (needs, brief, icp, limits, budget) and what the planner answered.
    Column("brief_json", Text, nullable=False),
    Column("plan_json", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_plans_workspace_created", "workspace_id", "created_at"),
)

# The actor catalog's change log (0011): one row per catalog version - the actor changed,
# its entry after the change (null for a deletion), who changed it and when.
actor_catalog_changes = Table(
    "actor_catalog_changes",
    metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("actor", String(128), nullable=False),
    Column("change", String(16), nullable=False),
    Column("entry_json", Text),
    Column("changed_by", String(128), nullable=False),
    Column("changed_at", DateTime(timezone=True), nullable=False),
    Index("ix_actor_catalog_changes_actor", "actor", "version"),
)

# Rows pushed to the callback (0013): one delivery cursor per child. ``next_seq`` and
# ``next_index`` say where the next unacknowledged batch starts; ``pending_end`` (exclusive
# item index) fixes the batch in flight so every retry sends the same rows.
row_deliveries = Table(
    "row_deliveries",
    metadata,
    Column("child_id", String(96), primary_key=True),
    Column("run_id", String(64), nullable=False),
    Column("rows_total", BigInteger, nullable=False),
    Column("next_seq", Integer, nullable=False),
    Column("next_index", BigInteger, nullable=False),
    Column("pending_end", BigInteger),
    Column("batches_pushed", Integer, nullable=False),
    Column("rows_pushed", BigInteger, nullable=False),
    Column("state", String(16), nullable=False),
    Column("failed_seq", Integer),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Index("ix_row_deliveries_run_id", "run_id"),
)
