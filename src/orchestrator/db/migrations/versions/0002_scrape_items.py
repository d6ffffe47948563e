"""scrape_items: one row per dataset item, unique per (child, item index).

Revision ID: 0002_scrape_items
Revises: 0001_scrape_runs
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_scrape_items"
down_revision = "0001_scrape_runs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scrape_items",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("child_id", sa.String(96), nullable=False),
        sa.Column("item_index", sa.BigInteger, nullable=False),
        sa.Column("workspace_id", sa.String(128), nullable=False),
        sa.Column("skill_run_id", sa.String(128)),
        sa.Column("conversation_id", sa.String(128)),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_scrape_items"),
        sa.UniqueConstraint("child_id", "item_index", name="uq_scrape_items_child_index"),
    )
    op.create_index("ix_scrape_items_run_id", "scrape_items", ["run_id", "id"])


def downgrade() -> None:
    op.drop_table("scrape_items")
