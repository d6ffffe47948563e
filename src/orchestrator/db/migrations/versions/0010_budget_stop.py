"""Budgets that stop requests: why a request was stopped (scrape_runs.stop_reason and
stop_message, null while nothing stopped it) and a workspace's spending limit
(workspaces.budget_usd per budget_period, ``day`` or ``month``; null: no limit).

Revision ID: 0010_budget_stop
Revises: 0009_request_budget
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_budget_stop"
down_revision = "0009_request_budget"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("scrape_runs") as batch:
        batch.add_column(sa.Column("stop_reason", sa.String(32), nullable=True))
        batch.add_column(sa.Column("stop_message", sa.Text(), nullable=True))
    with op.batch_alter_table("workspaces") as batch:
        batch.add_column(sa.Column("budget_usd", sa.Float(), nullable=True))
        batch.add_column(sa.Column("budget_period", sa.String(8), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workspaces") as batch:
        batch.drop_column("budget_period")
        batch.drop_column("budget_usd")
    with op.batch_alter_table("scrape_runs") as batch:
        batch.drop_column("stop_message")
        batch.drop_column("stop_reason")
