"""scrape_children: what each platform run cost (usageTotalUsd, charged events, settled).

Revision ID: 0008_child_usage
Revises: 0007_keep_partial_rows
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_child_usage"
down_revision = "0007_keep_partial_rows"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("scrape_children") as batch:
        batch.add_column(sa.Column("usage_total_usd", sa.Float()))
        batch.add_column(sa.Column("charged_events_json", sa.Text()))
        batch.add_column(sa.Column("usage_settled_at", sa.DateTime(timezone=True)))


def downgrade() -> None:
    with op.batch_alter_table("scrape_children") as batch:
        batch.drop_column("usage_settled_at")
        batch.drop_column("charged_events_json")
        batch.drop_column("usage_total_usd")
