"""scrape_events: the append-only event log of every request.

Revision ID: 0003_scrape_events
Revises: 0002_scrape_items
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_scrape_events"
down_revision = "0002_scrape_items"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scrape_events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("child_id", sa.String(96)),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("data_json", sa.Text),
        sa.Column("dedupe_key", sa.String(255)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_scrape_events"),
        sa.UniqueConstraint("dedupe_key", name="uq_scrape_events_dedupe_key"),
    )
    op.create_index("ix_scrape_events_run_id", "scrape_events", ["run_id", "id"])


def downgrade() -> None:
    op.drop_table("scrape_events")
