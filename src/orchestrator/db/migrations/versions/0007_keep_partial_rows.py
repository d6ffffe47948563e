"""scrape_runs.keep_partial_rows: whether children that did not succeed keep their rows.

Revision ID: 0007_keep_partial_rows
Revises: 0006_workspaces
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_keep_partial_rows"
down_revision = "0006_workspaces"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Requests stored before this column existed keep the new default (rows are kept).
    with op.batch_alter_table("scrape_runs") as batch:
        batch.add_column(
            sa.Column("keep_partial_rows", sa.Integer(), nullable=False, server_default="1")
        )


def downgrade() -> None:
    with op.batch_alter_table("scrape_runs") as batch:
        batch.drop_column("keep_partial_rows")
