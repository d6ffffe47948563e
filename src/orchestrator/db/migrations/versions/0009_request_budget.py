"""scrape_runs.budget_usd: the request's budget (USD), split across its children's
maxTotalChargeUsd when it was submitted; null for a request without one.

Revision ID: 0009_request_budget
Revises: 0008_child_usage
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_request_budget"
down_revision = "0008_child_usage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("scrape_runs", sa.Column("budget_usd", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scrape_runs") as batch:
        batch.drop_column("budget_usd")
