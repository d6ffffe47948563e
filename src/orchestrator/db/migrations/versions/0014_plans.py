"""Plans (``POST /plans``): a brief planned into actor runs, stored so that a caller can
review it and run it later (``POST /runs {"planId"}``), and shown with the request it
became (scrape_runs.plan_id).

Revision ID: 0014_plans
Revises: 0013_row_delivery
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_plans"
down_revision = "0013_row_delivery"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "plans",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("workspace_id", sa.String(128), nullable=False),
        sa.Column("catalog_version", sa.Integer(), nullable=False),
        sa.Column("strategy", sa.String(32), nullable=False),
        sa.Column("brief_json", sa.Text(), nullable=False),
        sa.Column("plan_json", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_plans_workspace_created", "plans", ["workspace_id", "created_at"])
    with op.batch_alter_table("scrape_runs") as batch:
        batch.add_column(sa.Column("plan_id", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scrape_runs") as batch:
        batch.drop_column("plan_id")
    op.drop_index("ix_plans_workspace_created", table_name="plans")
    op.drop_table("plans")
