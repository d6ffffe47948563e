"""scrape_runs: request headers and their child actor runs.

Revision ID: 0001_scrape_runs
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_scrape_runs"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "scrape_runs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("workspace_id", sa.String(128), nullable=False),
        sa.Column("conversation_id", sa.String(128)),
        sa.Column("skill_run_id", sa.String(128)),
        sa.Column("callback_url", sa.Text),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("aborted", sa.Integer, nullable=False),
        sa.Column("children_total", sa.Integer, nullable=False),
        sa.Column("children_succeeded", sa.Integer, nullable=False),
        sa.Column("children_failed", sa.Integer, nullable=False),
        sa.Column("items_total", sa.BigInteger, nullable=False),
        sa.Column("idempotency_key", sa.String(255)),
        sa.Column("request_hash", sa.String(64)),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("finished_at", TS),
        sa.PrimaryKeyConstraint("id", name="pk_scrape_runs"),
        sa.UniqueConstraint("workspace_id", "idempotency_key", name="uq_scrape_runs_idempotency"),
    )
    op.create_index(
        "ix_scrape_runs_workspace_created", "scrape_runs", ["workspace_id", "created_at"]
    )
    op.create_index("ix_scrape_runs_state", "scrape_runs", ["state"])
    op.create_table(
        "scrape_children",
        sa.Column("id", sa.String(96), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("platform_actor_id", sa.String(256), nullable=False),
        sa.Column("input_json", sa.Text, nullable=False),
        sa.Column("options_json", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("platform_run_id", sa.String(64)),
        sa.Column("dataset_id", sa.String(64)),
        sa.Column("platform_status", sa.String(32)),
        sa.Column("status_message", sa.Text),
        sa.Column("items_ingested", sa.BigInteger, nullable=False),
        sa.Column("ingest_offset", sa.BigInteger, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("started_at", TS),
        sa.Column("finished_at", TS),
        sa.PrimaryKeyConstraint("id", name="pk_scrape_children"),
        sa.ForeignKeyConstraint(
            ["run_id"], ["scrape_runs.id"], name="fk_scrape_children_run_id_scrape_runs"
        ),
        sa.UniqueConstraint("run_id", "idx", name="uq_scrape_children_run_idx"),
    )
    op.create_index("ix_scrape_children_platform_run_id", "scrape_children", ["platform_run_id"])


def downgrade() -> None:
    op.drop_table("scrape_children")
    op.drop_table("scrape_runs")
