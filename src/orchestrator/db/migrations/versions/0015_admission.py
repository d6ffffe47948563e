"""Capacity admission: an operator's limit on the platform runs a workspace may hold at once
(``workspaces.max_concurrent_runs``; null: none). The ``queued`` child state needs no schema
change (states are strings).

Revision ID: 0015_admission
Revises: 0014_plans
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_admission"
down_revision = "0014_plans"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workspaces") as batch:
        batch.add_column(sa.Column("max_concurrent_runs", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workspaces") as batch:
        batch.drop_column("max_concurrent_runs")
