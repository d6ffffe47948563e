"""Rows pushed to the callback (issue 12): whether a request asked for it
(scrape_runs.deliver_rows, ``none`` or ``callback``) and each child's delivery cursor
(row_deliveries: the next batch's sequence number and first item index, the batch in
flight, what was acknowledged, and how the push ended).

Revision ID: 0013_row_delivery
Revises: 0012_step_inputs
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_row_delivery"
down_revision = "0012_step_inputs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("scrape_runs") as batch:
        batch.add_column(
            sa.Column("deliver_rows", sa.String(16), nullable=False, server_default="none")
        )
    op.create_table(
        "row_deliveries",
        sa.Column("child_id", sa.String(96), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("rows_total", sa.BigInteger(), nullable=False),
        sa.Column("next_seq", sa.Integer(), nullable=False),
        sa.Column("next_index", sa.BigInteger(), nullable=False),
        sa.Column("pending_end", sa.BigInteger(), nullable=True),
        sa.Column("batches_pushed", sa.Integer(), nullable=False),
        sa.Column("rows_pushed", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("failed_seq", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("child_id", name="pk_row_deliveries"),
    )
    op.create_index("ix_row_deliveries_run_id", "row_deliveries", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_row_deliveries_run_id", table_name="row_deliveries")
    op.drop_table("row_deliveries")
    with op.batch_alter_table("scrape_runs") as batch:
        batch.drop_column("deliver_rows")
